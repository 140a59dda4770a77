"""`rolloutbatch ... | head`: the reader of stdout goes away before the output ends. The CLI stops
quietly with SIGPIPE's status, as kubectl does, instead of an error line and exit 1."""
import io
import os
import signal
import sys

import pytest

from rolloutbatch.cli.common import guarded


@pytest.mark.parametrize("flush", [True, False], ids=["while printing", "at the last flush"])
def test_a_reader_gone_ends_the_command_quietly(monkeypatch, flush):
    read_end, write_end = os.pipe()
    os.close(read_end)
    # Set here, not in a fixture: pytest's capture takes sys.stdout back after fixtures are set up.
    with open(write_end, "w", buffering=1 << 16) as closed_stdout:
        err = io.StringIO()
        monkeypatch.setattr(sys, "stdout", closed_stdout)
        monkeypatch.setattr(sys, "stderr", err)

        def command(_args):
            print("row\n" * 10, flush=flush)   # a buffered row only fails when flushed
            return 0

        code = guarded(command, None)
        assert code == 128 + signal.SIGPIPE
        assert err.getvalue() == ""
        closed_stdout.write("late\n")
        closed_stdout.flush()             # Python's flush at exit finds nothing to complain of


def test_a_broken_pipe_of_the_users_own_file_is_said(monkeypatch, tmp_path):
    """A pipe the command writes on the user's behalf (an --output into a FIFO whose reader died)
    is a file error like any other, said in one line: only stdout's reader gone is quiet."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)

    def command(_args):
        read_end, write_end = os.pipe()
        os.close(read_end)
        with open(write_end, "wb") as fifo:
            fifo.write(b"x" * 100_000)
        return 0

    assert guarded(command, None) == 1
    assert "Broken pipe" in err.getvalue()
