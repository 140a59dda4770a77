"""`rolloutbatch pool create` with an empty --image/--runtime-class/--task-mount-path (an
unset shell variable) is refused before any call, as `--verifier-image ""` is: the CLI module
promises "the operator's own checks refuse a bad pool before any call"."""
from __future__ import annotations

import pytest

from rolloutbatch import POOL_KIND
from tests.unit.cli.cli_runner import run
from tests.unit.cli.test_cli_pools import NS, api, task_files  # noqa: F401  (fixtures)


@pytest.mark.parametrize("flag", ["--image", "--runtime-class", "--task-mount-path"])
def test_an_empty_value_is_refused_before_any_call(capsys, api, task_files, flag):  # noqa: F811
    code, out, err = run(capsys, "pool", "create", "warm", "--size", "1", *task_files, flag, "")
    assert code in (1, 2) and flag.lstrip("-").split("-")[0] in err, (code, out, err)
    assert api.get_object(POOL_KIND, "warm", NS) is None
