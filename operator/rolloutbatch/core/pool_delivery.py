"""How a pooled pod gets its episode (core.pools; docs/design.md §5.17): the launcher a pool's pod
runs (it waits, holding nothing, then sources what it is handed and runs it), the script the
operator hands it through ``pods/exec`` (identity, input, command), and the exec's command.

Pure. Every piece is run by a real /bin/sh in the unit tests (tests/unit/core/test_pools.py,
test_pools_hostile_episodes.py): quoting, cut-off deliveries and signals are proved by running.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Sequence

from rolloutbatch.core import naming
from rolloutbatch.core.groups import group_and_sample
from rolloutbatch.core.vocabulary import NOT_DELIVERED_EXIT


# The warm pod's command (POSIX sh; `$$` is Kubernetes' escape for `$`). Positional parameters are
# the pool's prepare command. The prepare runs under a watchdog (as core.manifests' launchers do);
# its failure or timeout exits NOT_DELIVERED_EXIT. Then the FIFO `start` and the file `warm` (the
# startupProbe's), and the wait: a background `read` blocks on the FIFO without a process polling,
# and `wait` for it is what a trapped TERM interrupts, so a pod ended before its episode came (its
# deadline, a deletion, the batch's deadline) says NOT_DELIVERED_EXIT, never an agent's code. The
# script is parsed (`sh -n`) before it is sourced and must end with its sentinel: a cut-off
# delivery never runs. Its last line `set --`s the command under `env` (any variable name the spec
# allows), which runs in a subshell: this shell stays PID 1 (immune to its own processes' signals;
# the trap is reset first, so a running episode's TERM is ignored as before), a builtin as the
# command cannot take PID 1, and an agent's NOT_DELIVERED_EXIT is reported as 1.
WARM_LAUNCHER = (
    'c={claim}; '
    'if [ "$$#" -gt 0 ]; then "$$@" & p=$$!; '
    '(sleep {timeout}; kill -KILL $$p) 2>/dev/null & w=$$!; '
    'wait $$p || exit {nd}; kill $$w 2>/dev/null; fi; '
    'mkfifo "$$c/start" && : > "$$c/warm" || exit {nd}; '
    "trap 'exit {nd}' TERM INT HUP; "
    'read -r go < "$$c/start" & r=$$!; wait $$r; rm -f "$$c/start"; '
    '[ -f "$$c/episode.sh" ] && /bin/sh -n "$$c/episode.sh" 2>/dev/null || exit {nd}; '
    '. "$$c/episode.sh"; [ "$${{{sentinel}:-}}" = ready ] || exit {nd}; '
    'trap - TERM INT HUP; '
    '( "$$@" ); code=$$?; [ "$$code" -eq {nd} ] && code=1; exit "$$code"'
)
SENTINEL = "ROLLOUTBATCH_EPISODE"   # the episode script's last assignment: a whole script was delivered


def launcher(claim_dir: str, prepare_timeout: int) -> str:
    """WARM_LAUNCHER for a claim directory, as the pod's command carries it (``$$`` escaped)."""
    return WARM_LAUNCHER.format(claim=claim_dir, timeout=prepare_timeout, nd=NOT_DELIVERED_EXIT, sentinel=SENTINEL)


@dataclasses.dataclass(frozen=True)
class Episode:
    """What a pooled pod is handed: its identity, its input, its command."""
    batch_name: str
    index: int
    samples_per_input: int
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    input_json: str | None = None


def episode_script(episode: Episode) -> bytes:
    """The script the launcher sources: every value single-quoted (shlex.quote is POSIX quoting),
    so no value is ever read as shell. The input, when there is one, is written to a file of the
    pod's own claim directory and named by EPISODE_INPUT. The variables are ``env``'s arguments,
    not shell assignments: a name the spec allows need not be a shell identifier (``MY-VAR``).
    The sentinel is last: only a whole script sets it (WARM_LAUNCHER)."""
    group, sample = group_and_sample(episode.index, episode.samples_per_input)
    values: list[tuple[str, str]] = [("EPISODE_INDEX", str(episode.index)), ("EPISODE_GROUP", str(group)),
                                     ("EPISODE_SAMPLE", str(sample)), ("BATCH_NAME", episode.batch_name)]
    lines = []
    if episode.input_json is not None:
        path = f"{naming.CLAIM_MOUNT_PATH}/input.json"
        lines.append(f"printf '%s' {shlex.quote(episode.input_json)} > {path} || exit {NOT_DELIVERED_EXIT}")
        values.append(("EPISODE_INPUT", path))
    values += list(episode.env)
    words = ["env", *(f"{name}={value}" for name, value in values), *episode.command]
    lines.append("set -- " + " ".join(shlex.quote(word) for word in words))
    lines.append(f"{SENTINEL}=ready")
    return ("\n".join(lines) + "\n").encode()


def delivery_command(size: int) -> list[str]:
    """The exec that hands a pod its episode: ``size`` bytes of stdin into ``episode.sh`` (written
    aside, then renamed, so the launcher never reads half a script), then the FIFO's signal. The
    noclobber write fails on a pod that already has its script (a delivery repeated after a
    restart), which then only signals, if the launcher still waits."""
    c = naming.CLAIM_MOUNT_PATH
    # the size is checked: `head -c` ends without an error on a stdin cut short
    script = (f'if [ ! -e {c}/episode.sh ]; then head -c "$1" > {c}/.episode '
              f'&& [ "$(( $(wc -c < {c}/.episode) ))" -eq "$1" ] && mv {c}/.episode {c}/episode.sh '
              f'|| {{ rm -f {c}/.episode; exit 1; }}; fi; if [ -p {c}/start ]; then printf "go\\n" > {c}/start; fi')
    return ["/bin/sh", "-c", script, "rolloutbatch-deliver", str(size)]


def input_json(inputs: Sequence, index: int, samples_per_input: int) -> str | None:
    if not inputs:
        return None
    group, _ = group_and_sample(index, samples_per_input)
    return json.dumps(inputs[group], separators=(",", ":"))
