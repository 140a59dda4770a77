"""The SDK and the CLI run on Python 3.10: vermin finds nothing newer in any module they import.

No 3.10 interpreter is assumed on the machine, so a static checker reads the source instead:
vermin knows which Python first has each module, member, syntax form and keyword argument
(``enum.StrEnum``, ``typing.Self``, ``tomllib``, ``except*``, ``asyncio.TaskGroup``, ...). The
modules checked are the light part's closure (``tests/support/package_imports.py``), so a new
import of the SDK or the CLI is checked from the day it is written. The operator (``service``,
``handlers``, ``runner``, ...) needs 3.11 and is not checked.

A static checker does not see behaviour that changed between versions (``datetime.fromisoformat``
accepts a trailing ``Z`` only from 3.11: ``cli.render`` replaces it first).
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tests.support import package_imports as pi

FLOOR = (3, 10)


def vermin(*paths: pathlib.Path | str) -> tuple[int, str]:
    found = shutil.which("vermin") or str(pathlib.Path(sys.executable).parent / "vermin")
    if not pathlib.Path(found).exists():
        pytest.fail("vermin not installed: pip install -e '.[operator,dev]'", pytrace=False)
    # --eval-annotations: annotations count although `from __future__ import annotations` defers
    # them (typing.get_type_hints evaluates them, TypedDicts included); --violations lists only
    # what misses the target, with the line.
    run = subprocess.run([found, "--no-tips", "--eval-annotations", "--violations", "--processes=1",
                          f"--target={FLOOR[0]}.{FLOOR[1]}-", *map(str, paths)],
                         capture_output=True, text=True, timeout=300)
    return run.returncode, run.stdout + run.stderr


def test_vermin_catches_what_3_10_lacks(tmp_path):
    # The checker itself: each of these needs 3.11, and a checker that passes everything proves nothing.
    samples = {
        "strenum.py": "import enum\nclass Phase(enum.StrEnum):\n    A = 'a'\n",
        "self.py": "from typing import Self\n",
        "notrequired.py": "from typing import NotRequired\n",
        "toml.py": "import tomllib\n",
        "groups.py": "try:\n    pass\nexcept* ValueError:\n    pass\n",
        "utc.py": "import datetime\nnow = datetime.datetime.now(datetime.UTC)\n",
        "taskgroup.py": "import asyncio\nasync def f():\n    async with asyncio.TaskGroup():\n        pass\n",
        "timeout.py": "import asyncio\nasync def f():\n    async with asyncio.timeout(1):\n        pass\n",
    }
    for name, source in samples.items():
        (tmp_path / name).write_text(source)
        code, out = vermin(tmp_path / name)
        assert code != 0 and "Target versions not met" in out, (name, out)


def test_the_sdk_and_the_cli_need_nothing_newer_than_3_10():
    paths = pi.modules()
    light = sorted(pi.light_modules())
    assert "rolloutbatch.sdk.aio" in light and "rolloutbatch.cli.main" in light
    code, out = vermin(*(paths[name] for name in light))
    assert f"Analyzing {len(light)} files" in out, out   # every module, none dropped
    assert code == 0, f"needs more than Python {FLOOR[0]}.{FLOOR[1]}:\n{out}"
    minimum = re.search(r"Minimum required versions: ([\d.]+)", out)
    assert minimum and tuple(map(int, minimum.group(1).split("."))) <= FLOOR, out
