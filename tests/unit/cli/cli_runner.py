"""Run the CLI in-process as a user would, for the CLI tests: exit code, stdout and stderr."""
from __future__ import annotations

from rolloutbatch.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
