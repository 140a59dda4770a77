"""Trainer-driven episodes on a pooled sandbox (docs/design.md §5.17, "Trainer-driven sessions").

Many RL stacks run the agent loop in the trainer and use the sandbox as a tool executor. Such an
episode is a pooled batch's episode like any other, with a verifier; its command is the *hold*
below: it prints the episode's ``ready`` event, makes the FIFO ``session-end`` in the agent's
claim directory and blocks reading it. Meanwhile the trainer runs commands in the agent container
through ``pods/exec`` (sdk.sessions); a line written to the FIFO ends the agent phase with exit 0,
and the verifier grades the workspace. A trainer that never ends it (crashed) leaves the hold to
the agent launcher's watchdog: stopped at episodeTimeoutSeconds, the row flagged AgentTimedOut,
graded all the same. The session's stats (commands, their seconds) reach its row through an
annotation of the batch (``stats_annotation``, ``stats_of``).

Pure: text only. Both scripts are run by a real /bin/sh in tests/unit/core/test_sessions.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rolloutbatch.core import launchers, naming
from rolloutbatch.core.model import valid_session_stats

END_FIFO = "session-end"          # a line written here ends the session
ENDED_FILE = "session-ended"      # left by the hold once it read that line
HOLD_PID_FILE = "session-hold"    # the hold's process id (holding_command asks whether it lives)
# Exit codes of end_command: the hold ended now, had ended already, or had no FIFO (removed, or
# the hold never started in time).
ENDED, ALREADY_ENDED, NOT_HOLDING = 0, 4, 3
END_WAIT_TRIES = 100              # end_command waits up to this many 0.1 s for the FIFO

# The ready event's `at` is the episode's clock with sub-second precision where date(1) has %N
# (GNU, busybox): a whole second could fall before the claim and spend the verdict's skew
# tolerance. The event is printed before the FIFO is made: the end waits for the FIFO, then kills
# the hold, so with the FIFO first an end that came at once (a session ended as soon as it
# opened) could kill the hold before its event, and the episode had none. `read` returns on a
# line or on a writer's close: either ends the session. The hold records its process id, read by
# the shell itself from /proc/self (no `$$`: the operator expands a pooled command's `$$` to `$`,
# as the kubelet does), for holding_command; without /proc it records none, and holding_command
# then cannot tell.
_HOLD = ('c={claim}; {{ read -r p _ < /proc/self/stat && echo "$p" > "$c/{pid}"; }} 2>/dev/null; '
         'at=$({tools}date +%s.%N 2>/dev/null); case "$at" in ""|*[!0-9.]*|*.|.*) at=$({tools}date +%s);; esac; '
         'printf \'{{"event":"ready","at":%s,"episode_id":"%s"}}\\n\' "$at" "$EPISODE_ID"; '
         '{tools}mkfifo "$c/{fifo}" || exit 1; read -r line < "$c/{fifo}"; : > "$c/{ended}"; exit 0')

# Whether the hold still runs: its recorded process is there and no zombie. A command of the
# session that exits 137 was killed by the session's end only with the hold or once it had ended:
# end() kills them in one sweep; at the deadline the agent launcher reaps the hold its watchdog
# killed, then `kill -KILL -1`s what is left (core.launchers). So a 137 while the hold runs is the
# command's own (an OOM kill, `kill -9 $$`).
# The file is the session's to write too: a process it names must not be PID 1, the launcher,
# which outlives `kill -KILL -1` (a sandbox writing 1 there made a command the deadline cut off
# read as its own 137); any other process is gone once the session's end killed what was left.
_HOLDING = ('c={claim}; read -r p < "$c/{pid}" || exit 1; case "$p" in ""|*[!0-9]*|0*|1) exit 1;; esac; '
            'read -r s < "/proc/$p/stat" || exit 1; case "${{s##*) }}" in [ZX]*) exit 1;; esac; exit 0')

# The hold may not have started when the delivery is annotated (the launcher sources its script
# after the exec that signals it): wait for the FIFO, bounded. Then the end kills every process of
# the container but its PID 1 (the launcher) and itself, the hold among them (`kill -1`, the
# shell's own: all stopped first, so none sees another die and acts before its own kill lands;
# killed twice, for a process forked meanwhile), so the workspace the verifier grades is the one
# the trainer left: a line written to the FIFO let a process the session's commands left running
# write on until the launcher's own kill, and let one of them take the line first, rewrite the
# workspace and pass the line on. The hold's exit code is then the kill's (137), which no verdict
# grades. The session's own commands run as the hold's user in its directory (they can remove
# the FIFO or forge the marker): nothing the end says is taken on trust, the SDK confirms the end
# by the pod's status. A FIFO still missing after the wait was removed by them (the hold has long
# started): the end kills all the same, or what they left running wrote on until the deadline.
_END = ('c={claim}; n=0; a=0; while [ ! -p "$c/{fifo}" ]; do n=$((n+1)); '
        '[ "$n" -gt {tries} ] && {{ echo "no session FIFO in this container: its processes killed all the same" >&2; '
        'a={not_holding}; break; }}; {tools}sleep 0.1 2>/dev/null || {tools}sleep 1; done; '
        '[ "$a" = 0 ] && [ -e "$c/{ended}" ] && a={already}; kill -STOP -1 2>/dev/null; kill -KILL -1 2>/dev/null; '
        'kill -KILL -1 2>/dev/null; exit $a')


def _format(template: str, claim_dir: str, tries: int = END_WAIT_TRIES) -> str:
    return template.format(claim=claim_dir, fifo=END_FIFO, ended=ENDED_FILE, pid=HOLD_PID_FILE, tries=int(tries),
                           not_holding=NOT_HOLDING, already=ALREADY_ENDED, tools=launchers.TOOLS_SH)


def hold_command(claim_dir: str = naming.CLAIM_MOUNT_PATH) -> list[str]:
    """The session batch's ``spec.command``: the hold, run by sh (it runs under the agent launcher,
    as a pooled episode's command does)."""
    return ["/bin/sh", "-c", _format(_HOLD, claim_dir), "rolloutbatch-session"]


def is_hold_command(command: object) -> bool:
    """Whether a batch's ``spec.command`` is the hold (a session batch)."""
    return isinstance(command, list) and command[:1] == ["/bin/sh"] and command[-1:] == ["rolloutbatch-session"]


def end_command(claim_dir: str = naming.CLAIM_MOUNT_PATH, tries: int = END_WAIT_TRIES) -> list[str]:
    """The exec that ends a session by killing every process of its container but PID 1 (run it
    only in a container, or a PID namespace of its own): its exit code is ENDED, ALREADY_ENDED
    (the hold's marker was there: it had ended, or the session forged it) or NOT_HOLDING (no FIFO
    after ``tries`` waits of 0.1 s: the session removed it, or the hold never started; killed all
    the same)."""
    return ["/bin/sh", "-c", _format(_END, claim_dir, tries), "rolloutbatch-end"]


def holding_command(claim_dir: str = naming.CLAIM_MOUNT_PATH) -> list[str]:
    """The exec that asks whether the hold still runs: exit 0 when it does; anything else (no
    record of it: a hold of an older SDK, or no /proc) says it cannot be shown to."""
    return ["/bin/sh", "-c", _format(_HOLDING, claim_dir), "rolloutbatch-holding"]


# What a command given stdin runs behind: `head` reads exactly the stdin's size (on v4 too, where
# stdin has no end) and the command reads it through a pipe; once the command exited, `cat`
# drains what it left unread, and the exec exits with the command's own code (137 for a kill).
# Without it, a command that exits before reading all its stdin (`head -c 1`, `grep -q`, a script
# reading one line, a write refused at once) never got its exit status back: the container
# runtime reports an exec's exit only once it copied the whole stdin stream into the process
# (containerd's CRI exec waits for its copying after the exit), and that copy blocked on a full
# pipe no one read (kube.pod_exec; measured on the devcluster, tests/devcluster/test_pod_exec.py).
_DRAINED = 'n=$1; shift; head -c "$n" | { "$@"; c=$?; cat > /dev/null; exit "$c"; }'


def drained_command(argv: list[str], size: int) -> list[str]:
    """``argv`` given ``size`` bytes of stdin, all of which are read whatever ``argv`` reads."""
    return ["/bin/sh", "-c", _DRAINED, "rolloutbatch-stdin", str(int(size)), *argv]


# A command past its timeout must not run on and change the workspace the verifier grades, and
# the API cannot signal an exec's process (closing the stream leaves it running). So each of
# run()'s execs carries a marker of its own in its environment, which every process it starts
# inherits (one that clears its environment escapes it), and a timeout stops them by it.
# A command whose exec had not started its process when the stop ran (a loaded node: the exec's
# way through the API server, kubelet and runtime) must not start after it either: the stop
# first leaves a mark named by the marker in the claim directory, and a marked command that
# finds it exits STOPPED_BEFORE_START instead of running. One that looked before the mark was
# there is already a process: its shell has the marker in its arguments until it execs, and in
# its environment after, so the stop reads both (its arguments first) and misses neither.
COMMAND_MARKER = "ROLLOUTBATCH_COMMAND"
STOPPED_PREFIX = "session-stopped-"   # + the marker: the stop's mark, in the claim directory
STOPPED_BEFORE_START = 137            # a marked command the stop reached before it ran, as if killed
STOP_TRIES = 50                   # stop_command's passes over /proc, 0.1 s apart
_MARKED_NAME = "rolloutbatch-marked"
# Set by the shell, then exec'd: the exec's own process is marked from its start, and its exit
# code, output and stdin are those of `argv` (no env(1): the file verbs need only /bin/sh).
_MARKED = ('{marker}=$1; export {marker}; shift; [ -e "{claim}/{stopped}${marker}" ] && exit {before}; '
           'exec "$@"')
# Each process's arguments, then its environ, read by the shell itself (no process per pid):
# `read` drops their NUL bytes (dash, bash, busybox), so the marker is sought in the joined text
# (the marked shell's name and the marker, joined, are in no other process's arguments, the
# stop's own included); every marker has one length, so none is another's prefix. A pass stops
# each marked process it finds and kills them all at its end: killed one by one in /proc's order
# (10 before 2), a child died before its parent, which ran on (`sleep 1; echo late > answer.txt`
# wrote at once). A process forked during a pass is found by the next; the passes end with one
# that finds none (a killed process's environ reads empty). Prints how many it killed; exit 1
# when some still ran after STOP_TRIES passes, 2 without /proc. The stop's mark is a directory:
# made by mkdir, which never blocks where a write would (the session's own command may have put a
# FIFO there; anything already at the path stops the command all the same).
_STOP = ('m=$1; [ -r /proc/self/environ ] || {{ echo "no /proc in this container" >&2; exit 2; }}; '
         '{tools}mkdir -- "{claim}/{stopped}$m" 2>/dev/null; '
         'k=0; n=0; while :; do f=; for p in /proc/[0-9]*; do {{ h=; '
         'while IFS= read -r l || [ -n "$l" ]; do case "$l" in *"{name}$m"*) h=1; break;; esac; done < "$p/cmdline"; '
         '[ -z "$h" ] && while IFS= read -r l || [ -n "$l" ]; do case "$l" in *"{marker}=$m"*) h=1; break;; esac; '
         'done < "$p/environ"; [ -n "$h" ] && kill -STOP "${{p#/proc/}}" && f="$f ${{p#/proc/}}" && k=$((k+1)); '
         '}} 2>/dev/null; done; [ -z "$f" ] && {{ echo "$k"; exit 0; }}; kill -KILL $f 2>/dev/null; n=$((n+1)); '
         '[ "$n" -ge {tries} ] && {{ echo "$k"; exit 1; }}; {tools}sleep 0.1 2>/dev/null || {tools}sleep 1; done')


def marked_command(argv: list[str], marker: str, claim_dir: str = naming.CLAIM_MOUNT_PATH) -> list[str]:
    """``argv`` with ``marker`` in its environment and that of all it starts (stop_command); it
    does not run once the stop of ``marker`` was made in ``claim_dir``."""
    script = _MARKED.format(marker=COMMAND_MARKER, claim=claim_dir, stopped=STOPPED_PREFIX, before=STOPPED_BEFORE_START)
    return ["/bin/sh", "-c", script, _MARKED_NAME, marker, *argv]


def stop_command(marker: str, claim_dir: str = naming.CLAIM_MOUNT_PATH) -> list[str]:
    """The exec that kills every process marked ``marker`` (marked_command), and keeps one not
    started yet from running; it prints how many it killed."""
    script = _STOP.format(marker=COMMAND_MARKER, name=_MARKED_NAME, claim=claim_dir, stopped=STOPPED_PREFIX,
                          tries=STOP_TRIES, tools=launchers.TOOLS_SH)
    return ["/bin/sh", "-c", script, "rolloutbatch-stop", marker]


# What the trainer's own execs run: a file written aside then renamed (a cut-off stdin never
# leaves half a file; `head -c` because a v4 exec cannot close stdin), and a file read whole.
# Exit codes say what went wrong: the SDK raises FileNotFoundError / IsADirectoryError /
# PermissionError for them, and a SessionError for a path that is there but no regular file
# (reading a FIFO would block). A path under a directory the user cannot search is not "no such
# file" (test -e cannot tell the two apart): the nearest directory that is there says which; a
# file the user may not read is a PermissionError too. A symbolic link that leads nowhere is
# opened once, which says why (its target is missing, cannot be searched, or the links loop: an
# OSError of ELOOP, as Python's own open raises); its strerror in English (LC_ALL=C), which glibc
# ("Too many levels of symbolic links") and musl ("Symbolic link loop") both spell with it.
NO_SUCH_FILE, IS_A_DIRECTORY, NOT_A_FILE, NOT_PERMITTED, LINK_LOOP = 3, 4, 5, 6, 7
PATH_MAX = 4096                   # Linux's, with its NUL: a longer path is refused before any exec
# A directory at the path (or a link to one) would take the file inside it (`mv`): refused. A
# symbolic link is followed to the file it names (a chain too; `readlink -f`, GNU's and
# busybox's), as the agent's own `>` would, so the link stays and its target is what the
# verifier grades; a dangling one creates its target, one whose target's directory is missing
# (or a loop) is refused. A link out of the workspace is no new right: an absolute path is taken
# as it is. The part written aside has a short name of its own in the target's directory (the
# path's name plus a suffix could pass NAME_MAX; the rename stays in one file system), unique to
# this exec's shell (two writes of one path never share it), and takes the mode of the file it
# replaces (a script edited stays executable). `printf .` keeps a name's trailing newline from
# `$( )`. Read through `<` (cat reads a file named `-` as stdin) and at most one byte past the
# caller's limit, so a file too large is said at once and no read runs on in the sandbox.
_WRITE = ('[ -d "$2" ] && exit {isdir}; p=$2; if [ -L "$p" ]; then p=$(readlink -f -- "$p" && printf .) '
          '&& p=${{p%??}} || {{ echo "cannot follow the symbolic link $2: its target\'s directory is missing, '
          'or the links loop" >&2; exit 1; }}; fi; d=$(dirname -- "$p"; printf .); d=${{d%??}}; t="$d/.rb-part-$$"; '
          'mkdir -p -- "$d" && head -c "$1" > "$t" && [ "$(( $(wc -c < "$t") ))" -eq "$1" ] '
          '&& {{ m=$(stat -c %a -- "$p" 2>/dev/null) && chmod "$m" "$t"; mv -f -- "$t" "$p"; }} '
          '|| {{ rm -f -- "$t" 2>/dev/null; exit 1; }}').format(isdir=IS_A_DIRECTORY)
_READ = ('[ -d "$1" ] && exit {isdir}; if [ ! -e "$1" ]; then if [ -L "$1" ]; then '
         'e=$(LC_ALL=C; export LC_ALL; exec 2>&1; /bin/sh -c \': < "$0"\' "$1"); case "$e" in '
         '*"ermission denied"*) echo "permission denied: $1 is a symbolic link to where the user cannot reach" >&2; '
         'exit {denied};; *"ymbolic link"*) echo "the symbolic links loop: $1" >&2; exit {loop};; esac; fi; '
         'p=$1; while :; do case "$p" in */*) p=${{p%/*}};; '
         '*) p=.;; esac; [ -z "$p" ] && p=/; [ -e "$p" ] && break; [ "$p" = . ] && break; done; '
         '[ -d "$p" ] && [ ! -x "$p" ] && {{ echo "permission denied: $p cannot be searched" >&2; exit {denied}; }}; '
         'echo "no such file: $1" >&2; exit {missing}; fi; '
         '[ -f "$1" ] || {{ echo "not a regular file: $1" >&2; exit {special}; }}; '
         '[ -r "$1" ] || {{ echo "permission denied: $1 cannot be read" >&2; exit {denied}; }}; '
         'exec head -c "$2" < "$1"').format(isdir=IS_A_DIRECTORY, missing=NO_SUCH_FILE, special=NOT_A_FILE,
                                           denied=NOT_PERMITTED, loop=LINK_LOOP)


def write_file_command(path: str, size: int) -> list[str]:
    return ["/bin/sh", "-c", _WRITE, "rolloutbatch-write", str(size), path]


def unspellable(word: str) -> str | None:
    """What in ``word`` no exec argument can carry, or None. A NUL byte ends a C string; a lone
    surrogate (a name ``os.fsdecode`` made of bytes that are not UTF-8) is not UTF-8, and the URL
    library dropped it from the exec's query without a word: ``build\\udcff`` ran as ``build``."""
    if "\x00" in word:
        return "a NUL byte"
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return "a character that is not UTF-8 (a lone surrogate: bytes os.fsdecode could not decode)"
    return None


def checked_path(path: object) -> str:
    """A file path a trainer's session may name: a non-empty string that an exec argument can
    carry (refused here, not changed on the way nor refused by the runtime with an unclear status).
    Relative paths are in the workspace (the exec's directory); an absolute one is taken as it is."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"a file path must be a non-empty string, got {path!r}")
    if (why := unspellable(path)) is not None:
        raise ValueError(f"a file path cannot hold {why}: {path!r}"[:300])
    if len(path.encode()) >= PATH_MAX:   # no system call takes it; the read's walk up it would be long
        raise ValueError(f"a file path of {len(path.encode())} bytes is longer than any system call takes "
                         f"({PATH_MAX - 1}): {path[:100]!r}...")
    return path


def read_file_command(path: str, max_bytes: int) -> list[str]:
    """At most ``max_bytes`` + 1 bytes of the file: more than ``max_bytes`` says it is too large."""
    return ["/bin/sh", "-c", _READ, "rolloutbatch-read", path, str(int(max_bytes) + 1)]


# -- a session's stats in its row ----------------------------------------------------------------
# The commands a trainer ran and their seconds are known only to its SDK: at end() it writes them
# on the batch (one annotation per episode, a merge patch that touches no other's), and the
# operator copies them into the episode's row when it judges the pod. They describe the trainer's
# own session and are never counted, so a value the batch's owner wrote by hand misleads only
# itself; anything that is not exactly this shape is left out.
def stats_annotation(index: int, pod: str, commands: int, command_seconds: float) -> dict[str, str]:
    """The batch annotation that records the session stats of episode ``index``, held by ``pod``
    (the index's pod at the time: a retry of the index is another pod, with stats of its own)."""
    stats = {"commands": commands, "command_seconds": round(float(command_seconds), 6)}
    if valid_session_stats(stats) is None:
        raise ValueError(f"session stats out of range: {stats}")
    return {f"{naming.SESSION_STATS_ANNOTATION_PREFIX}{index}": json.dumps({"pod": pod, **stats},
                                                                           separators=(",", ":"))}


def stats_of(annotations: Mapping, index: int, pod: str) -> dict | None:
    """The session stats of episode ``index`` as held by ``pod``, from the batch's annotations; None
    when there are none, they are another pod's, or they are not valid."""
    text = annotations.get(f"{naming.SESSION_STATS_ANNOTATION_PREFIX}{index}") if annotations else None
    if not isinstance(text, str) or len(text) > 400:
        return None
    try:
        value = json.loads(text)   # NaN or Infinity parse, and valid_session_stats refuses them
    except ValueError:
        return None
    if not isinstance(value, dict) or value.pop("pod", None) != pod:
        return None
    return valid_session_stats(value)
