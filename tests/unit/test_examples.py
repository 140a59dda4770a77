"""The committed examples are exactly what examples/render.py makes from examples/tasks/."""
import importlib.util
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
