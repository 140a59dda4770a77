"""The committed examples are exactly what examples/render.py makes from examples/tasks/."""
import importlib.util
import json
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
spec = importlib.util.spec_from_file_location("render_examples", EXAMPLES / "render.py")
render = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render)


@pytest.mark.parametrize("name", sorted(render.examples()))
def test_example_matches_its_generator(name):
    expected = render.render(name, render.examples()[name])
    assert (EXAMPLES / name).read_text() == expected, f"run: python examples/render.py ({name} drifted)"


def test_task_programs_compile():
    for path in (EXAMPLES / "tasks").glob("*.py"):
        compile(path.read_text(), str(path), "exec")


def _load(name):
    spec_ = importlib.util.spec_from_file_location(name, EXAMPLES / "tasks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


def test_scripted_policy_answers_the_agents_prompt_per_session(capsys):
    server, agent, verifier = _load("policy_server"), _load("model_agent"), _load("shipping_fix_verifier")
    prompt = {"messages": [{"role": "user", "content": agent.PROMPT.format(source=agent.SOURCE)}]}
    sessions = [f"shipping-fix-model-{i}-abcde" for i in range(40)]
    edits = {s: server.edit_for(s) for s in sessions}
    assert set(edits.values()) == {"right", "wrong"}          # rewards vary within a batch
    graded = set()
    for s in sessions:
        content = server.complete(prompt, s)["choices"][0]["message"]["content"]
        fixed = agent.FENCE.search(content).group(1)            # the agent's own parser reads it
        if edits[s] not in graded:                               # the verifier's tests tell them apart
            graded.add(edits[s])
            assert (verifier.run_tests(fixed)[0] == 0) == (edits[s] == "right"), fixed
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["session"], r["edit"]) for r in logged] == list(edits.items())
    with pytest.raises(ValueError):
        server.complete({"messages": [{"role": "user", "content": "no code here"}]}, "s")
    with pytest.raises(ValueError):
        server.complete({"messages": "nonsense"}, "s")
    for odd in (3, 1.5, None, {"role": "user"}):
        with pytest.raises(ValueError):
            server.complete({"messages": odd}, "s")
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": prompt["messages"][0]["content"]}]}]}
    assert "total" in server.complete(parts, "s")["choices"][0]["message"]["content"]   # OpenAI content parts


@pytest.mark.parametrize("forged", [
    "import os\nos._exit(0)\n",                                              # exit 0 before any check
    "print('[10, 0, 0]')\nimport os\nos._exit(0)\n",                         # canned answers
    "import unittest\nunittest.TestCase.assertEqual = lambda *a: None\ndef shipping(t):\n    return 10\n",
    "def shipping(total):\n    return True if total < 99 else False\n",     # bools are not the answers
    "import sys, json\nprint(json.dumps([0] * 100))\nsys.exit(0)\n",
])
def test_the_example_verifier_pays_nothing_for_a_forged_fix(forged):
    verifier = _load("shipping_fix_verifier")
    assert verifier.run_tests(forged)[0] != 0
    assert verifier.run_tests(verifier.BASELINE)[0] != 0
    assert verifier.run_tests("def shipping(total):\n    return 0 if total >= 99 else 10\n") == (0, "")


def test_the_inputs_by_reference_example_is_opted_in_and_read_by_the_operator():
    from rolloutbatch.core.admission import input_shards
    from rolloutbatch.core.spec import parse_spec

    configmap, batch = render.examples()["inputs-by-reference.yaml"]
    spec = parse_spec(batch["spec"])
    assert spec.inputs_from == (configmap["metadata"]["name"],)
    assert len(input_shards([configmap], spec.inputs_from, spec.inputs_count)[0]) == spec.episodes
