"""One container = one bwrap process tree: agent -> bwrap -> bwrap (PID 1 of the sandbox) -> command.

Output: stdout and stderr pipes are read by the agent's event loop and appended to the
container's log file line by line (CRI format, see logstore). Signals: SIGTERM goes to the
command (found through /proc/<pid>/task/<pid>/children), SIGKILL to the outer bwrap, whose
sandbox init dies with it (--die-with-parent) and takes the whole PID namespace down.
The outer bwrap stays in the agent's process group and has PDEATHSIG=SIGKILL via bwrap's
--die-with-parent, so a SIGKILLed agent leaves no sandbox behind.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time

from .logstore import ContainerLog

log = logging.getLogger("nodeagent.process")

CHUNK = 65536
MAX_LINE = 16384


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def exit_code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class ContainerProcess:
    def __init__(self, argv: list[str], env: dict, logs: ContainerLog):
        self.argv = argv
        self.env = env
        self.logs = logs
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.finished_at = 0.0
        self._pumps: list[asyncio.Task] = []

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, close_fds=True)
        self.started_at = time.time()
        self._pumps = [asyncio.create_task(self._pump(self.proc.stdout, "stdout")),
                       asyncio.create_task(self._pump(self.proc.stderr, "stderr"))]

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        rest = b""
        write = self.logs.write
        while True:
            chunk = await stream.read(CHUNK)
            if not chunk:
                break
            data = rest + chunk
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                write(name, line, False)
            while len(rest) > MAX_LINE:
                write(name, rest[:MAX_LINE], True)
                rest = rest[MAX_LINE:]
        if rest:
            write(name, rest, True)

    async def wait(self) -> int:
        rc = await self.proc.wait()
        if self._pumps:
            # the sandbox is gone; stray writers holding the pipe are dead too
            try:
                await asyncio.wait_for(asyncio.gather(*self._pumps, return_exceptions=True), 5)
            except asyncio.TimeoutError:
                for t in self._pumps:
                    t.cancel()
        self.finished_at = time.time()
        return exit_code_of(rc)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def terminate(self) -> None:
        """SIGTERM to the container's command (PID 2 in the sandbox, its 'main process')."""
        if not self.running:
            return
        targets = [c for init in _children(self.proc.pid) for c in _children(init)]
        if not targets:  # not yet exec'd or already gone: stop the sandbox outright
            self.kill()
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.running:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    async def stop(self, grace: float) -> None:
        if not self.running:
            return
        self.terminate()
        if grace > 0:
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
                return
            except asyncio.TimeoutError:
                pass
        self.kill()
