"""How a pooled pod gets its episode (core.pools; docs/design.md §5.17): the launcher a pool's pod
runs (it waits, holding nothing, then sources what it is handed and runs it), the script the
operator hands it on its stdin through ``pods/attach`` (identity, input, command), and the bytes
sent (:func:`delivery`). Without a verifier the episode runs under a watchdog at its time from
its hand-over (the time handed over with it), as a Job's pod runs under its deadline. With a verifier, the pod's containers each wait so, and each phase
then runs under the Job pod's own launcher for it (core.launchers): the agent's when it is handed
its episode, the verifier's once the agent's container has ended (its command and time handed
over then, after its files and input were handed to the writer that alone can write them).

Pure. Every piece is run by a real /bin/sh in the unit tests (tests/unit/core/test_pools.py,
test_pools_hostile_episodes.py, test_pools_verifier.py): quoting, cut-off deliveries and signals
are proved by running.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shlex
from collections.abc import Sequence

from rolloutbatch.core import launchers, naming
from rolloutbatch.core.env_expansion import expand, expand_env
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.model import PodFacts
from rolloutbatch.core.vocabulary import AGENT_OVERRAN_EXIT, NOT_DELIVERED_EXIT


# Every launcher starts here: the claim directory, and every tool it runs once a prepare may have
# started (`head` reads the delivery, `sleep` times the prepare and the agent, `rm` clears what the
# prepare left, `tail` and `cat` say how a prepare failed, `chmod` keeps the agent's record
# writable) fixed by its full path. A prepare runs as the pod's user and could put a tool into a
# directory of the tools' PATH that user can write and that comes first (/usr/local/bin in some
# images): a `head` read every delivery and failed the one whose draw it did not like (a re-roll),
# an `rm` run after the kill of the prepare's processes started one that did the same (a hostile
# review's attacks). Each tool is the first of the standard directories' whose file and directory
# the launcher's user cannot write; else the first on the tools' PATH (the prepare could replace
# that one: docs/design.md §11); else its name, failing as it did. Found in the pod's start, not in
# a hand-over. The trap first, as _PREPARE's comment says.
_START = ("c={claim}; trap 'exit {nd}' TERM INT HUP; "
          'found() {{ for d in {tool_dirs}; do [ -f "$$d/$$1" ] && [ -x "$$d/$$1" ] && [ ! -w "$$d/$$1" ] && '
          '[ ! -w "$$d" ] && {{ echo "$$d/$$1"; return; }}; done; {tools}command -v "$$1" || echo "$$1"; }}; '
          'hd=$$(found head); sl=$$(found sleep); rmf=$$(found rm); tl=$$(found tail); ct=$$(found cat); '
          'chm=$$(found chmod); ')
# The tools so fixed, for core.launchers' agent launcher in a pool's pod.
FIXED_SLEEP, FIXED_CHMOD = '"$$sl"', '"$$chm"'

# The warm pod's command (POSIX sh; `$$` is Kubernetes' escape for `$`). Positional parameters are
# the pool's prepare command. The prepare runs under a watchdog (as core.manifests' launchers do);
# its failure or timeout exits NOT_DELIVERED_EXIT. Then the file `warm`, and the wait on the
# container's stdin (the pod's `stdin: true`), kept as fd 3 while everything else reads /dev/null
# (the file and PID 1's /dev/null are the startupProbe's sign: core.pool_children; a background
# list's stdin is /dev/null in sh): a background reader answers PING lines, takes one line of the
# length and the send's key, then the script but its last line into `episode.sh` (`head -c`: no end
# of file needed, which a v4 attach cannot send), and its last line with the shell's own `read`,
# which must be the sentinel set to that key: a delivery cut short (inside a quoted value, say) and
# completed by another attach's bytes has the other send's bytes there, so it is refused before
# anything of it runs, whatever the values (a value cannot hold a key drawn at random for each send;
# nor can the script before its last line, so a script whose last line checks is whole). The length
# must be 1 to MAX_LENGTH_DIGITS plain digits without a leading 0 and the key its 2 * KEY_BYTES hex
# digits, refused before any arithmetic: POSIX sh reads a constant with a leading 0 as octal
# ($((010)) is 8 in dash and bash), and a number past the shell's integer range is an error or
# wraps. One process (`head`) between the script's arrival and RECEIVED: each fork and exec there
# was paid by twenty hand-overs at once on a loaded node (a count by `wc` and the last line by
# `tail` were two more). The key is kept in `episode.key` for the check after sourcing (the reader
# is a subshell). No process polls, and `wait` for it is what a trapped TERM interrupts, so a pod
# ended before its episode came (its deadline, a deletion, the batch's deadline) says
# NOT_DELIVERED_EXIT, never an agent's code. Then stdin is closed, RECEIVED is printed (what the
# operator's attach waits for, before anything the script runs), and the script is parsed (`sh -n`)
# before it is sourced and must end with its sentinel: a cut-off delivery never runs. Its last line
# `set --`s the command under `env` (any variable name the spec allows); then {run} runs it.
# The trap comes first: a pod deleted while it prepares (the Job controller's cold pod for an
# index a claimed pod holds) then says NOT_DELIVERED_EXIT too, not the 137 of a PID 1 shell that
# ignored TERM and was killed, which would read as an episode's failure.
# The prepare's output stays out of the container's log: the operator reads an episode's log from
# its first byte, up to its byte budget, and a verbose prepare (an install, a build) would spend
# every episode's budget before the episode printed a line. It goes through a FIFO to `tail`, which
# keeps its last 4 KiB (bounded: a file in the claim emptyDir would count against its sizeLimit,
# whatever the prepare printed), printed only when the prepare fails (the pod then runs no
# episode), and with a line saying how it ended (its code, or its timeout) as the container's
# termination message, which the pool's Stalled condition quotes (core.pool_census; a watchdog that
# fired ignores TERM, so its exit says it fired, as core.launchers' do). An image without `mkfifo`
# says so in the same place. Nothing the prepare started outlives it: once it ended well, every
# process of the container but the launcher (PID 1) is stopped, then killed twice (as a session's
# end does). A process it left ran as the launcher's user into the wait: it answered the pings,
# read the episode from the container's stdin (/proc/1/fd/0) and killed the reader of a draw it
# did not like (the episode then lost: retried), or rewrote the script's time and handed it on
# with the same key (a hostile review's attacks on the devcluster). Only as PID 1: elsewhere (a
# unit test on a host) `kill -1` would reach every process of its user. Then whatever is already
# on the container's stdin is read and dropped: the prepare could write a whole delivery of its
# own there (/proc/1/fd/0, with a key of its choosing) and exit, and the launcher ran it as its
# episode once warm (two reviews' attack). A `cat` reads it, stopped once it sleeps (blocked on the
# empty pipe: state S) and at least 0.2 s passed, or after 5 s; nothing else writes there before
# the pod is warm, and the operator sends nothing before the launcher's PONG, so a ping it sent
# early is lost and sent again.
# Then the claim directory is emptied (a FIFO at `warm` blocked `: > warm` for ever while the pod
# counted warm; one at a session's names blocked its hold); what the launcher cannot remove fails
# the pod, PREPARE_LEFT in its termination message.
_PREPARE = ("trap 'exit {nd}' TERM INT HUP; "
            'if [ "$$#" -gt 0 ]; then if ! {tools}mkfifo "$$c/prepare.out"; then '
            'm="{mkfifo}"; echo "$$m"; echo "$$m" > {term}; exit {nd}; fi; '
            '"$$tl" -c 4096 < "$$c/prepare.out" > "$$c/prepare.tail" & t=$$!; '
            '"$$@" > "$$c/prepare.out" 2>&1 & p=$$!; '
            '("$$sl" {timeout}; trap "" TERM; kill -KILL $$p) 2>/dev/null & w=$$!; '
            'wait $$p; s=$$?; kill $$w 2>/dev/null; "$$rmf" -f "$$c/prepare.out"; '
            'if [ "$$s" -ne 0 ]; then ("$$sl" 2; kill $$t) 2>/dev/null & wait $$t; '
            'if wait $$w; then m="ran past its {timeout}s"; else m="exited $$s"; fi; '
            '{{ echo "rolloutbatch: the pool prepare $$m; its output ends:"; "$$tl" -c 1024 "$$c/prepare.tail"; }} '
            '> {term} 2>/dev/null; "$$ct" "$$c/prepare.tail"; exit {nd}; fi; "$$rmf" -f "$$c/prepare.tail"; '
            '[ "$$$$" = 1 ] && {{ kill -STOP -1; kill -KILL -1; kill -KILL -1; }} 2>/dev/null; '
            'exec 3<&0; "$$ct" <&3 > /dev/null 3<&- & d=$$!; exec 3<&-; i=0; while [ "$$i" -lt 50 ]; do '
            '{{ "$$sl" 0.1 || "$$sl" 1; }} 2>/dev/null; i=$$((i + 1)); st=; read -r _ _ st _ < /proc/$$d/stat; '
            '[ "$$i" -ge 2 ] && [ "$$st" = S ] && break; done 2>/dev/null; kill -KILL $$d 2>/dev/null; '
            'wait $$d 2>/dev/null; '
            '"$$rmf" -rf "$$c"/* "$$c"/.[!.]* "$$c"/..?* || '
            '{{ m="{left}"; echo "$$m"; echo "$$m" > {term}; exit {nd}; }}; fi; ')
_READ = (': > "$$c/warm" || exit {nd}; '
         "trap 'exit {nd}' TERM INT HUP; exec 3<&0 < /dev/null; "
         '{{ while read -r n k && [ "$$n" = {ping} ]; do echo "{pong}"; done; '
         'case "$$n" in ""|0*|*[!0-9]*|{too_long}) exit 1;; esac; '
         'case "$$k" in *[!0-9a-f]*) exit 1;; esac; [ "$${{#k}}" -eq {key_chars} ] || exit 1; '
         '[ "$$n" -ge {sentinel_bytes} ] && "$$hd" -c "$$(( n - {sentinel_bytes} ))" > "$$c/episode.sh" && '
         'read -r l && [ "$$l" = "{sentinel}=$$k" ] && echo "$$l" >> "$$c/episode.sh" && '
         'echo "$$k" > "$$c/episode.key"; }} <&3 & r=$$!; '
         'wait $$r || exit {nd}; read -r k < "$$c/episode.key" || exit {nd}; '
         'exec 3<&-; ')
_SOURCE = ('/bin/sh -n "$$c/episode.sh" 2>/dev/null || exit {nd}; '
           '. "$$c/episode.sh"; [ "$${{{sentinel}:-}}" = "$$k" ] || exit {nd}; ')
_RECEIVED = 'echo "{received}"; '
_WAIT = _READ + _RECEIVED + _SOURCE + 'trap - TERM INT HUP; '
# Each phase's time limit is the one the script sets (TIMEOUT_VARIABLE): the episode's time counts
# from its hand-over, not from the pod's start (a warm pod may have waited for hours).
TIMEOUT_VARIABLE = "ROLLOUTBATCH_TIMEOUT"
_TIMEOUT = '"$${' + TIMEOUT_VARIABLE + '}"'
# Without a verifier: the command in the background (this shell stays PID 1, immune to its own
# processes' signals; the trap was reset, so a running episode's TERM is ignored as before; a
# builtin as the command cannot take PID 1) under a watchdog that stops it at its time, as a Job's
# pod is stopped by its deadline: the pod's own deadline after a hand-over is the operator's
# reckoning of it plus HANDED_OVER_SLACK_SECONDS (core.pools), or the claim's slack when that
# was never written. An agent stopped so, or that ran past its time at all (it may kill its
# watchdog, which runs as its user: the shell's own clock says so, as core.launchers' agent
# launcher's does), exits AGENT_OVERRAN_EXIT, the verdict's Timeout; the agent's own exit of that
# code or of NOT_DELIVERED_EXIT is reported as 1.
_RUN = ('{began}"$$@" & agent=$$!; '
        '("$$sl" {episode_timeout}; trap "" TERM; kill -KILL $$agent) 2>/dev/null & watchdog=$$!; '
        'wait $$agent; code=$$?; [ "$$code" -eq {nd} ] || [ "$$code" -eq {overran} ] && code=1; '
        'kill -TERM $$watchdog 2>/dev/null; wait $$watchdog 2>/dev/null && code={overran}; {ended}'
        '{ran_past} && code={overran}; '
        'exit "$$code"')
# With a verifier, each phase runs under the Job's own launcher for it (core.launchers): the
# agent's ends with its record and exit 0, the verifier's with the verifier's code, an exit of
# NOT_DELIVERED_EXIT reported as 1.
WARM_LAUNCHER = _START + _PREPARE + _WAIT + _RUN
SENTINEL = "ROLLOUTBATCH_EPISODE"   # the delivery's last assignment, to its key: a whole script was delivered
KEY_BYTES = 16                      # of each send's key (hex): no value handed over can guess it
MAX_LENGTH_DIGITS = 9               # of the length line: under 1 GB, in range of any sh's arithmetic (32-bit too)
MAX_DELIVERY_BYTES = 10 ** MAX_LENGTH_DIGITS - 1
RECEIVED = "rolloutbatch: episode received"   # the launcher's line once it has read its whole script
MKFIFO_MISSING = "rolloutbatch: mkfifo failed: the pool launcher needs it in the image to run prepare"
PREPARE_LEFT = ("rolloutbatch: the pool prepare exited 0 but left files in the claim directory that the launcher "
                "cannot remove (or the image has no rm): the directory is the launcher's")
# Before the length, the sender may send PING lines; each is answered PONG. containerd starts
# copying an attach's stdin before it adds the attach to the container's stdout (internal/cri/io,
# ContainerIO.Attach), so a line printed at once may never reach that attach: the sender pings
# until a PONG comes back, and only then sends what RECEIVED answers (kube.pod_attach).
PING, PONG = "ping", "rolloutbatch: waiting for an episode"
HELLO = (PING.encode() + b"\n", PONG.encode())   # (what the sender writes, what it waits for)
# What the verifier of a pod whose agent never ran (or whose agent launcher failed) is handed: it
# ends without grading, as a pod that never got its episode (the agent's exit says which).
ABORT_SCRIPT = f"exit {NOT_DELIVERED_EXIT}\n".encode()


def _format(template: str, claim_dir: str, prepare_timeout: int = 0) -> str:
    return template.format(claim=claim_dir, timeout=prepare_timeout, nd=NOT_DELIVERED_EXIT, sentinel=SENTINEL,
                           sentinel_bytes=len(SENTINEL) + 2 + 2 * KEY_BYTES,   # its line: name, '=', key, newline
                           key_chars=2 * KEY_BYTES, too_long="?" * (MAX_LENGTH_DIGITS + 1) + "*",
                           received=RECEIVED, ping=PING, pong=PONG, term=naming.TERMINATION_MESSAGE_PATH,
                           mkfifo=MKFIFO_MISSING, left=PREPARE_LEFT, episode_timeout=_TIMEOUT,
                           overran=AGENT_OVERRAN_EXIT,
                           began=launchers.uptime("began"), ended=launchers.uptime("ended"), tools=launchers.TOOLS,
                           tool_dirs=" ".join(launchers.TOOL_DIRS),
                           ran_past=launchers.ran_past(_TIMEOUT))


def launcher(claim_dir: str, prepare_timeout: int, verified: bool = False) -> str:
    """The episode container's command (``$$`` escaped): WARM_LAUNCHER, or with a verifier the
    agent phase's launcher in place of its last step."""
    if not verified:
        return _format(WARM_LAUNCHER, claim_dir, prepare_timeout)
    run = launchers.agent_launcher("", _TIMEOUT, overran_exit=AGENT_OVERRAN_EXIT, sleep=FIXED_SLEEP, chmod=FIXED_CHMOD)
    return _format(_START + _PREPARE + _WAIT, claim_dir, prepare_timeout) + run


# The verifier's files writer (a pool pod's third container, naming.VERIFIER_FILES_CONTAINER): it
# waits as the others do, then sources what it is handed (the files and the input, written into
# the volumes it alone mounts writable) and only then says RECEIVED, and ends: the operator hands
# the verifier its phase once it heard that line, so every file is whole before the verifier runs.
# Its script runs nothing of the episode's (no output can bury the line); a write that fails
# leaves out the mark the verifier's script checks (:func:`files_script`).
FILES_WRITER_LAUNCHER = _START + _READ + _SOURCE + _RECEIVED + 'exit 0'


def verifier_launcher(claim_dir: str) -> str:
    """The verifier container's command (``$$`` escaped): it waits as the episode container does
    (no prepare), then runs what it is handed under the Job's verifier launcher."""
    run = launchers.verifier_launcher("", _TIMEOUT, not_delivered=NOT_DELIVERED_EXIT)
    return _format(_START + _WAIT, claim_dir) + run


def files_writer_launcher(claim_dir: str) -> str:
    """The verifier's files writer's command (``$$`` escaped): FILES_WRITER_LAUNCHER."""
    return _format(FILES_WRITER_LAUNCHER, claim_dir)


@dataclasses.dataclass(frozen=True)
class Episode:
    """What a pooled pod's container is handed: its identity, its input, its command; with a
    verifier, the phase's time limit, and for the verifier its files."""
    batch_name: str
    index: int
    samples_per_input: int
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    input_json: str | None = None
    timeout_seconds: int | None = None              # the phase's launcher's limit
    files: tuple[tuple[str, str], ...] = ()         # the verifier's files: name, content
    files_dir: str | None = None                    # where they are written (the verifier's own emptyDir)
    # what a failed write of the input or files exits: before the agent ran, the pod never got its
    # episode; in the verifier's phase the attempt was made, and a verifier that cannot start is
    # the episode's failure, as in a Job's pod (exit 1: VerifierFailed)
    write_failed_exit: int = NOT_DELIVERED_EXIT
    episode_id: str | None = None                   # the pod's name (EPISODE_ID), for $(EPISODE_ID) references


def episode_script(episode: Episode, claim_dir: str | None = None, written_by: str | None = None) -> bytes:
    """The script the launcher sources: every value single-quoted (shlex.quote is POSIX quoting),
    so no value is ever read as shell. The input, when there is one, is written to a file of the
    container's own claim directory and named by EPISODE_INPUT; files go to ``files_dir``. With
    ``written_by`` (the verifier's files writer's directory) the script writes nothing: the
    writer wrote both (:func:`files_script`), and EPISODE_INPUT names the input where it is. The
    variables are ``env``'s arguments, not shell assignments: a name the spec allows need not be
    a shell identifier (``MY-VAR``). ``$(NAME)`` references in the env and the command are expanded
    first, as the kubelet expands a Job pod's (core.env_expansion). Its sentinel is added by
    :func:`delivery`, with the send's key."""
    claim_dir = claim_dir or naming.CLAIM_MOUNT_PATH
    input_path = f"{written_by or claim_dir}/input.json" if episode.input_json is not None else None
    failed = f"exit {episode.write_failed_exit}"
    lines = [f"[ -e {shlex.quote(f'{written_by}/{WRITTEN}')} ] || {failed}"] if written_by \
        else _writes(episode, input_path, failed)
    if episode.timeout_seconds is not None:
        lines.append(f"{TIMEOUT_VARIABLE}={int(episode.timeout_seconds)}")
    values = episode_variables(episode.batch_name, episode.index, episode.samples_per_input, episode.env,
                               input_path, episode.episode_id)
    known = {"EPISODE_ID": episode.episode_id} if episode.episode_id is not None else {}
    known.update(values)
    command = [expand(word, known) for word in episode.command]
    if command and "=" in command[0]:
        # env(1) would read it as a variable and run the next word; the kubelet would run a
        # program of that name (none): a shell runs it as a name, and fails as a Job pod would
        command = ["/bin/sh", "-c", 'exec "$0" "$@"', *command]
    words = ["env", *(f"{name}={value}" for name, value in values), *command]
    lines.append("set -- " + " ".join(shlex.quote(word) for word in words))
    return ("\n".join(lines) + "\n").encode()


def _writes(episode: Episode, input_path: str | None, failed: str) -> list[str]:
    """Shell writing the episode's input to ``input_path`` and its files into ``files_dir``,
    running ``failed`` when a write fails."""
    lines = []
    if episode.input_json is not None and input_path is not None:
        written = shlex.quote(episode.input_json)
        lines.append(f"printf '%s' {written} > {shlex.quote(input_path)} || {failed}")
    for name, content in episode.files:
        target = shlex.quote(f"{episode.files_dir}/{name}")
        lines.append(f"printf '%s' {shlex.quote(content)} > {target} || {failed}")
    return lines


WRITTEN = "written"   # the files writer's mark, in its directory, that every write succeeded


def files_script(episode: Episode, writer_dir: str) -> bytes:
    """What the verifier's files writer (FILES_WRITER_LAUNCHER) is handed: the verifier phase's
    files and input, the input into ``writer_dir`` (where ``episode_script(..., written_by=
    writer_dir)`` names it), then the mark WRITTEN there when every write succeeded. A write that
    fails does not end the writer (it says RECEIVED all the same, and the verifier is handed its
    phase): the verifier's script finds no mark and exits ``write_failed_exit``, a verifier that
    could not start (VerifierFailed), as it was when it wrote its files itself."""
    lines = _writes(episode, f"{writer_dir}/input.json", "rb_unwritten=1")
    lines.append(f'[ -n "${{rb_unwritten:-}}" ] || : > {shlex.quote(f"{writer_dir}/{WRITTEN}")}')
    return ("\n".join(lines) + "\n").encode()


def episode_variables(batch_name: str, index: int, samples_per_input: int, env: Sequence[tuple[str, str]],
                      input_path: str | None = None, episode_id: str | None = None) -> list[tuple[str, str]]:
    """What episode ``index``'s command sees beside its container's own env (EPISODE_ID, the pool's
    env): its identity, its input's file, and the batch's plain env with its ``$(NAME)`` references
    expanded as the kubelet would (``episode_id``: the pod's name, for ``$(EPISODE_ID)``). The
    delivery hands these over; a session's commands get the same (sdk.sessions)."""
    group, sample = group_and_sample(index, samples_per_input)
    values = [("EPISODE_INDEX", str(index)), ("EPISODE_GROUP", str(group)), ("EPISODE_SAMPLE", str(sample)),
              ("BATCH_NAME", batch_name)]
    if input_path is not None:
        values.append(("EPISODE_INPUT", input_path))
    known = {"EPISODE_ID": episode_id} if episode_id is not None else {}
    known.update(values)
    return [*values, *expand_env(env, known)]


def maybe_handed_over(facts: PodFacts, since: float) -> bool:
    """The pod was claimed (or, cold, created) before ``since``, when this operator's delivery for
    the batch began: an earlier operator may have handed it its phase and died before annotating
    it. Creation times are whole seconds, rounded down: a pod of that second counts as earlier."""
    began = facts.claimed_at if facts.claimed_at is not None else facts.created
    return began < since


def delivery(script: bytes) -> bytes:
    """What the launcher is sent on its stdin: a line of the length and a key drawn for this send,
    then the script, its last line the sentinel set to that key."""
    key = secrets.token_hex(KEY_BYTES)
    whole = script + f"{SENTINEL}={key}\n".encode()
    if len(whole) > MAX_DELIVERY_BYTES:
        raise ValueError(f"an episode's script of {len(whole)} bytes is more than the pool launcher takes "
                         f"({MAX_DELIVERY_BYTES})")
    return b"%d %s\n" % (len(whole), key.encode()) + whole


def input_json(inputs: Sequence, index: int, samples_per_input: int) -> str | None:
    if not inputs:
        return None
    group, _ = group_and_sample(index, samples_per_input)
    return json.dumps(inputs[group], separators=(",", ":"))
