"""A command run with stdin as a container runtime's exec runs it: the whole stdin is copied into
the process's stdin pipe, whose read end the runtime keeps open, and the exit is reported only
once that copy is done (measured on the devcluster: tests/devcluster/test_pod_exec.py). A command
that exits without reading all of it leaves the copy blocked on a full pipe: here that is
:class:`StdinUnread` after ``timeout``, where a real exec never answers."""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading


class StdinUnread(AssertionError):
    """The command exited, but its stdin could not be copied whole: the exec would never answer."""


def run_like_the_runtime(command: list[str], stdin: bytes, cwd, timeout: float = 10) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, stdin=read_end, stdout=out, stderr=err, cwd=cwd)
        copied = threading.Event()

        def copy() -> None:
            try:
                view = memoryview(stdin)
                while view:
                    view = view[os.write(write_end, view):]
                copied.set()
            except OSError:   # the read end closed below: the copy never finished
                pass
            finally:
                os.close(write_end)
        copier = threading.Thread(target=copy, daemon=True)
        copier.start()
        try:
            code = proc.wait(timeout=timeout)
            if not copied.wait(timeout=timeout):
                raise StdinUnread(f"{command!r} exited {code} with its stdin unread: the exec would hang")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(read_end)   # the runtime's end, held until now; unblocks a stuck copy
            copier.join()
        out.seek(0)
        err.seek(0)
        # a process a signal ended: the runtime reports 128 + its number, as a shell does
        return subprocess.CompletedProcess(command, code if code >= 0 else 128 - code, out.read(), err.read())
