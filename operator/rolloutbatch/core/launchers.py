"""The two phases' launchers of an episode with ``spec.verifier`` (docs/design.md §4, "The
verifier phase"): POSIX sh texts a container runs as its command, ``$$`` escaped (Kubernetes'
escape for ``$``, so that ``$(...)`` is not read as a variable reference).

A Job's pod runs them as its init container and its container (core.manifests); a warm pool's
pod runs the same texts after it was handed its episode (core.pool_delivery), its time limit then
a shell variable of what it was handed. One text per phase, whichever pod runs it.

Pure: text only.
"""

from __future__ import annotations

from rolloutbatch.core import naming
from rolloutbatch.core.events import AGENT_EXIT
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, VERIFIER_TIMEOUT_EXIT

VERIFIER_SLACK_SECONDS = 5   # a pod's deadline allows this for the launchers' work between the two phases

# The launchers' own tools (sleep, chmod; the pool launcher's head, tail, mkfifo, cat, rm) are
# looked up in the standard directories first: a spec.env PATH naming only the agent's own
# (PATH=/opt/venv/bin) left the watchdog without `sleep`, and it stopped every agent at once, a
# Timeout. An assignment before one command: the agent's PATH stays its own.
# TOOLS_SH in a script a shell reads as it is (a command's argument: the session's hold), TOOLS in
# a container's command, where Kubernetes reads `$$` as `$`.
TOOL_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
TOOLS_SH = "PATH=" + ":".join(TOOL_DIRS) + "${PATH:+:$PATH} "
TOOLS = TOOLS_SH.replace("$", "$$")

# The agent's command runs under this launcher: it stops the agent at episodeTimeoutSeconds, then
# kills every process left in the container (kill -1 spares only the caller), so nothing of the
# agent runs into the verifier's phase and nothing can write after the record; then it appends the
# agent's exit code to its own termination message (the last line is therefore the launcher's) and
# exits 0, so the verifier always starts (a Job's launcher: unless a process of its container was
# killed for its memory, oom_killed below: the kubelet would not start it anyway). The watchdog
# exits 0 only when it fired (killed, it exits 137): that is the timeout record. The watchdog
# ignores TERM once it fired and is stopped with TERM, so one that fired always exits 0 (stopped
# by KILL, one caught between its kill and its exit read as not fired: a timed-out verifier was
# reported as exit 137 on a busy node). The watchdog runs as the agent's user, so the agent can
# kill it: the phase's own clock (the kernel's uptime, before and after, read by the shell itself:
# no process, where `date` was two per episode; and no wall clock to step) then still says it ran
# past its time. An agent that blocks the record (e.g. a read-only file it chmodded) fails the
# launcher, and with it its own episode.
_AGENT = ('{group}{began}"$$@" & agent=$$!; '
          '({sleep} {timeout}; trap "" TERM; kill -KILL $$agent) 2>/dev/null & watchdog=$$!; '
          'wait $$agent; code=$$?; timed_out=false; '
          'kill -TERM $$watchdog 2>/dev/null; wait $$watchdog 2>/dev/null && timed_out=true; '
          'kill -KILL -1 2>/dev/null; kill -KILL -1 2>/dev/null; '
          '{ended}'
          '{ran_past} && timed_out=true; '
          '[ -w {path} ] || {chmod} u+w {path} 2>/dev/null; '
          "printf '\\n{{\"event\":\"{event}\",\"exit_code\":%d,\"timed_out\":%s}}\\n' "
          '"$$code" "$$timed_out" >> {path} || exit 120; {overran}{oom}exit 0')
# An agent that ran past its time by more than the slack (its watchdog killed) fails its
# container, in a Job's pod as in a pool's: the verifier must not grade work done in its time
# (a Job's pod then never starts it, as a kubelet runs init containers), nor, in a pool's pod,
# make the episode a retry when handed over late or cut by the pod's deadline while it waited
# (core.pools.failure_rules and core.manifests.job judge the agent first).
_OVERRAN = '{ran_past} && exit {code}; '

# The verifier runs under this launcher. The pod's deadline alone would hand a hanging verifier
# the agent's unused time too: a watchdog stops the verifier at verifier.timeoutSeconds after it
# started; then every process left in the container is killed (kill -1 spares the caller, and a
# container's PID 1 is immune to its own processes' signals), so nothing the agent's code started
# outlives the verifier; the launcher exits with the verifier's code, or VERIFIER_TIMEOUT_EXIT
# when the watchdog fired. {remap}: in a pool's pod a verifier's own exit NOT_DELIVERED_EXIT is
# reported as 1 (that code says the pod never ran its episode).
_VERIFIER = ('{group}"$$@" & verifier=$$!; '
             '({tools}sleep {timeout}; trap "" TERM; kill -KILL $$verifier) 2>/dev/null & watchdog=$$!; '
             'wait $$verifier; code=$$?; {remap}'
             'kill -TERM $$watchdog 2>/dev/null; wait $$watchdog 2>/dev/null && code={timeout_exit}; '
             'kill -KILL -1 2>/dev/null; exit $$code')


def agent_launcher(group: str, timeout: int | str, overran_exit: int = AGENT_OVERRAN_EXIT,
                   oom_exit: int | None = None, sleep: str = TOOLS + "sleep", chmod: str = TOOLS + "chmod") -> str:
    """The agent phase: ``group`` is shell run first (core.manifests' group setup, or ''),
    ``timeout`` its seconds (a number, or a shell expansion); an agent that ran more than
    VERIFIER_SLACK_SECONDS past it exits ``overran_exit``, after its record; with ``oom_exit``,
    one a process of which was killed for its memory exits that (:func:`oom_killed`). ``sleep``
    and ``chmod`` are its tools (a pool's pod fixed them before its prepare ran:
    core.pool_delivery)."""
    overran = _OVERRAN.format(ran_past=ran_past(timeout, VERIFIER_SLACK_SECONDS), code=overran_exit)
    return _AGENT.format(group=group, timeout=timeout, path=naming.TERMINATION_MESSAGE_PATH, event=AGENT_EXIT,
                         overran=overran, sleep=sleep, chmod=chmod, began=uptime("began"), ended=uptime("ended"),
                         ran_past=ran_past(timeout), oom=oom_killed(oom_exit) if oom_exit is not None else "")


# The kernel's count of a container's processes killed for their memory, as the container sees its
# own memory cgroup (runc: v1's memory.oom_control, v2's memory.events; a line `oom_kill N`). The
# runtime reports a container OOMKilled when it saw such a kill, whatever the exit code. A gVisor
# sandbox has neither file: its kills stay inside it, and nothing is reported.
OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def oom_killed(code: int, counters: tuple[str, ...] = OOM_COUNTERS) -> str:
    """Shell that exits ``code`` when one of ``counters`` (a file it can read) counts a kill. A Job's
    agent launcher runs it after its record (vocabulary.AGENT_OOM_KILLED_EXIT): the kubelet has
    failed the pod anyway (its verifier never starts), and a non-zero exit is what the Job's
    podFailurePolicy can fail the index on, where it cannot read a reason."""
    # the count compared as text, not by `-gt`: no shell's arithmetic limit to pass
    return "".join(f'[ -r {path} ] && while read key count; do [ "$$key" = oom_kill ] && case "$$count" in '
                   f'*[!0-9]*) ;; [1-9]*) exit {code};; esac; done < {path}; ' for path in counters)


# The phase's clock is /proc/uptime in hundredths of a second (Linux and gVisor print two
# decimals): in whole seconds an agent that killed its watchdog and ended 10.75 s into a 10 s
# limit read 14 - 4 = 10, not past it, and the pod's deadline then left its verifier no time (a
# bad attempt made lost on purpose). A gVisor sandbox's uptime starts at 0: the leading zeros are
# dropped, as sh would read "007" as octal. Anything else is an unknown clock (empty).
def uptime(name: str) -> str:
    """Shell setting ``name`` to /proc/uptime in hundredths of a second (empty when it cannot be read)."""
    return (f'{name}=; read {name} _ 2>/dev/null < /proc/uptime; case "$${name}" in '
            f'*[!0-9.]*|*.*.*|.*) {name}=;; '
            f'*.[0-9][0-9]) {name}=$${{{name}%.*}}$${{{name}#*.}}; {name}=$${{{name}#"$${{{name}%%[!0]*}}"}}; '
            f'{name}=$${{{name}:-0}};; '
            f'*) {name}=;; esac; ')


def ran_past(timeout: int | str, slack: int = 0) -> str:
    """Shell test: the clocks ``began`` and ``ended`` (uptime) were read and more than ``timeout``
    seconds (a number, or a shell expansion of one) plus ``slack`` lie between them."""
    return (f'[ -n "$$began" ] && [ -n "$$ended" ] && '
            f'[ "$$((ended - began - {slack * 100}))" -gt {timeout}00 ]')


def verifier_launcher(group: str, timeout: int | str, not_delivered: int | None = None) -> str:
    """The verifier phase; with ``not_delivered``, that exit code of the verifier is reported as 1."""
    remap = f'[ "$$code" -eq {not_delivered} ] && code=1; ' if not_delivered is not None else ""
    return _VERIFIER.format(group=group, timeout=timeout, remap=remap, timeout_exit=VERIFIER_TIMEOUT_EXIT,
                            tools=TOOLS)
