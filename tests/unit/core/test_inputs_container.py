"""Job mode with inputs: only the first init container mounts the inputs ConfigMap(s) and copies
the episode's own input into an emptyDir the episode's containers mount read-only (README's
threat model: no episode reads another's input)."""
import json
import subprocess

import pytest

from rolloutbatch.core import manifests, naming
from rolloutbatch.core.k8s_rules import pod_amounts
from rolloutbatch.core.spec import parse_spec
from tests.unit.core.factories import MINIMAL, REF

VERIFIER = {"files": {"verify.py": "x"}, "timeoutSeconds": 60}


def _pod(raw):
    return manifests.job(REF, parse_spec(raw), None)["spec"]["template"]["spec"]


def _inline(episodes, k=1, **more):
    return {**MINIMAL, "episodes": episodes, "samplesPerInput": k,
            "inputs": [{"g": g} for g in range(episodes // k)], **more}


def _mounts(container):
    return {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in container["volumeMounts"]}


@pytest.mark.parametrize("raw", [MINIMAL, {**MINIMAL, "verifier": VERIFIER}])
def test_no_inputs_no_inputs_container(raw):
    pod = _pod(raw)
    names = [c["name"] for c in pod.get("initContainers", [])]
    assert naming.INPUTS_CONTAINER not in names
    assert not any(v["name"].startswith("inputs") for v in pod["volumes"])


@pytest.mark.parametrize("verifier", [None, VERIFIER])
def test_only_the_inputs_container_mounts_the_configmap(verifier):
    raw = _inline(4, verifier=verifier) if verifier else _inline(4)
    pod = _pod(raw)
    first, *others = pod["initContainers"]
    assert first["name"] == naming.INPUTS_CONTAINER
    assert _mounts(first) == {"inputs-source": (naming.INPUTS_SOURCE_MOUNT_PATH, True),
                              "inputs": (naming.INPUTS_MOUNT_PATH, False)}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["inputs-source"]["configMap"] == {"name": naming.inputs_configmap_name(REF)}
    # One input (a ConfigMap key, under 1 MiB) lives there: bounded, so nothing fills the node's disk.
    assert volumes["inputs"] == {"name": "inputs", "emptyDir": {"sizeLimit": "2Mi"}}
    episode = [*others, *pod["containers"]]
    assert [c["name"] for c in episode] == (["agent", "verifier"] if verifier else ["episode"])
    for container in episode:   # the agent and the verifier: their own copy, read-only
        mounts = _mounts(container)
        assert "inputs-source" not in mounts
        assert mounts["inputs"] == (naming.INPUTS_MOUNT_PATH, True)


@pytest.mark.parametrize("verifier", [None, VERIFIER])
def test_inputs_container_is_the_agents_image_resources_and_security(verifier):
    raw = _inline(4, image="repo/agent:1", resources={"requests": {"cpu": "1", "memory": "1Gi"},
                                                      "limits": {"memory": "2Gi", "nvidia.com/gpu": "1"}})
    if verifier:
        raw["verifier"] = {**VERIFIER, "resources": {"requests": {"cpu": "2", "memory": "3Gi"}}}
    pod = _pod(raw)
    inputs = pod["initContainers"][0]
    agent = next(c for c in [*pod["initContainers"], *pod["containers"]] if c["name"] in ("agent", "episode"))
    assert inputs["image"] == agent["image"] == "repo/agent:1"
    assert inputs["resources"] == agent["resources"]
    assert inputs["securityContext"] == agent["securityContext"]
    assert inputs["terminationMessagePolicy"] == "File"
    assert inputs["command"][:2] == ["/bin/sh", "-c"]
    assert [e["name"] for e in inputs["env"]] == ["EPISODE_INDEX"]
    # an init container is charged max(init, containers): the pod's totals are as without it
    without = {**pod, "initContainers": pod["initContainers"][1:]}
    assert pod_amounts(pod) == pod_amounts(without)


def test_the_failure_policy_names_the_inputs_container_first():
    for raw, judged in ((_inline(2), ["inputs", "episode"]),
                        (_inline(2, verifier=VERIFIER), ["inputs", "agent", "verifier"]),
                        (MINIMAL, ["episode"])):
        rules = manifests.job(REF, parse_spec(raw), None)["spec"]["podFailurePolicy"]["rules"]
        assert [r["onExitCodes"]["containerName"] for r in rules[1:]] == judged
        assert all(r["action"] == "FailIndex" for r in rules[1:])


def _run(script, tmp_path, index, files):
    """The init container's script as a kubelet runs it ($$ -> $), its paths moved under tmp_path."""
    src, dst, log = tmp_path / "src", tmp_path / "dst", tmp_path / "termination-log"
    for d in (src, dst):
        d.mkdir(exist_ok=True)
        for f in d.iterdir():
            f.unlink()
    for name, text in files.items():
        (src / name).write_text(text)
    text = (script.replace("$$", "$").replace(naming.INPUTS_SOURCE_MOUNT_PATH, str(src))
            .replace(naming.INPUTS_MOUNT_PATH, str(dst)).replace(naming.TERMINATION_MESSAGE_PATH, str(log)))
    done = subprocess.run(["/bin/sh", "-c", text, "rolloutbatch-inputs"], capture_output=True, text=True,
                          env={"EPISODE_INDEX": str(index), "PATH": "/usr/bin:/bin"})
    return done, sorted(p.name for p in dst.iterdir()), log.read_text() if log.exists() else None


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_copy_holds_only_the_episodes_own_group_input(tmp_path, k):
    spec = parse_spec(_inline(8, k))
    script = manifests.job(REF, spec, None)["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    files = {f"input-{g}.json": json.dumps({"g": g}) for g in range(8 // k)}
    for index in range(8):
        done, copied, _ = _run(script, tmp_path, index, files)
        assert done.returncode == 0, done.stderr
        assert copied == [f"input-{index // k}.json"]
        assert json.loads((tmp_path / "dst" / copied[0]).read_text()) == {"g": index // k}


def test_episode_input_names_the_copied_file(tmp_path):
    k1 = {e["name"]: e.get("value") for e in _pod(_inline(2))["containers"][0]["env"]}
    assert k1["EPISODE_INPUT"] == f"{naming.INPUTS_MOUNT_PATH}/input-$(EPISODE_INDEX).json"
    launcher = _pod(_inline(8, 4))["containers"][0]["command"][2].replace("$$", "$")
    out = subprocess.run(["/bin/sh", "-c", launcher, "x", "/bin/sh", "-c", 'echo "$EPISODE_INPUT"'],
                         env={"EPISODE_INDEX": "5", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.stdout.strip() == f"{naming.INPUTS_MOUNT_PATH}/input-1.json"


def test_shards_are_one_source_directory(tmp_path):
    spec = parse_spec({**MINIMAL, "episodes": 4, "inputsFrom": {"configMaps": ["a", "b"], "count": 4}})
    pod = manifests.job(REF, spec, None)["spec"]["template"]["spec"]
    source = next(v for v in pod["volumes"] if v["name"] == "inputs-source")
    assert [s["configMap"]["name"] for s in source["projected"]["sources"]] == \
        [naming.inputs_shard_name(REF, 0), naming.inputs_shard_name(REF, 1)]
    assert _mounts(pod["containers"][0])["inputs"] == (naming.INPUTS_MOUNT_PATH, True)
    done, copied, _ = _run(pod["initContainers"][0]["command"][2], tmp_path, 3,
                           {f"input-{g}.json": "{}" for g in range(4)})
    assert done.returncode == 0 and copied == ["input-3.json"]


@pytest.mark.parametrize("index", ["9", "", "x"])
def test_a_missing_input_fails_loudly(tmp_path, index):
    script = _pod(_inline(4, 2))["initContainers"][0]["command"][2]
    done, copied, message = _run(script, tmp_path, index, {"input-0.json": "{}", "input-1.json": "{}"})
    assert done.returncode != 0 and copied == []
    assert "rolloutbatch:" in done.stderr and message and message in done.stderr


def test_manifests_share_no_mutable_piece():
    """Each Job is built of new objects: a caller editing one (an env entry, a security context)
    changes no other Job built before or after it."""
    raw = _inline(4, verifier=VERIFIER)
    first, second = _pod(raw), _pod(raw)
    for container in [*first["initContainers"], *first["containers"]]:
        for entry in container.get("env", []):
            entry.setdefault("valueFrom", {}).setdefault("fieldRef", {})["fieldPath"] = "spoiled"
        container["securityContext"]["capabilities"]["drop"].clear()
    assert second == _pod(raw)
    for container in [*second["initContainers"], *second["containers"]]:
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
