"""spec.verifier and the termination-message channel in the pure core."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutbatch.core import launchers, log_tails, manifests, vocabulary as v
from rolloutbatch.core.events import parse_line, parse_log, parse_termination_message, split_agent_record
from rolloutbatch.core.model import AgentFacts, BatchRef, EpisodeResult, PodFacts, SpecError
from rolloutbatch.core.spec import parse_spec
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.verdict_verified import judge_verified
from rolloutbatch.core.pod_reading import pod_facts
from tests.unit.core.pool_shell import kills_its_watchdog

T0 = 1_700_000_000.0
BASE = {"episodes": 2, "task": {"files": {"episode.py": "pass"}}}


def ev(kind, at, who="pod-0", **f):
    return json.dumps({"event": kind, "at": at, "episode_id": who, **f})


def facts(**over):
    base = dict(name="pod-0", namespace="ns", uid="u", index=0, created=T0, phase="Succeeded", node="n",
                image_id=None, exit_code=0, restart_count=0, terminated_reason="Completed", pod_reason=None,
                pod_message=None, disrupted=False, deleting=False, ready=True, started_at=T0, finished_at=T0 + 10,
                waiting_reason=None, waiting_message=None)
    base.update(over)
    return PodFacts(**base)


RECORD = '\n{"event":"agent_exit","exit_code":%d,"timed_out":%s}\n'


def agent(code=0, timed_out="false", own=""):
    return AgentFacts(state="terminated", exit_code=0, message=own + RECORD % (code, timed_out), finished_at=T0 + 5)


def log(*lines):
    return parse_log("\n".join(lines).encode())


def verifier_log(*lines):
    """A verifier's stdout: a channel the agent's code it runs writes into too."""
    return parse_log("\n".join(lines).encode(), shared=True)


def test_message_channel_rules():
    assert parse_termination_message("") is None and parse_termination_message("just text") is None
    ok = parse_termination_message(ev("ready", T0 + 1) + "\n" + ev("reward", T0 + 2, reward=1))
    assert len(ok.ready) == 1 and not ok.truncated
    cut = parse_termination_message("x" * 4096)
    assert cut is not None and cut.truncated            # at the cap: never success, never stdout
    r = judge_episode(facts(), cut, channel=v.CHANNEL_TERMINATION_MESSAGE)
    assert r.reason == v.EP_LOG_LIMIT and "4096" in r.message
    good = judge_episode(facts(), ok, channel=v.CHANNEL_TERMINATION_MESSAGE)
    assert good.outcome == v.OUTCOME_SUCCEEDED and good.channel == v.CHANNEL_TERMINATION_MESSAGE


def test_agent_record_is_the_last_line_only():
    body, record = split_agent_record("hello" + RECORD % (3, "true"))
    assert body == "hello" and record == {"exit_code": 3, "timed_out": True}
    assert split_agent_record('{"event":"agent_exit","exit_code":0,"timed_out":false}\nforged after')[1] is None
    assert split_agent_record(None) == ("", None)


def test_pod_facts_reads_both_phases():
    pod = {"metadata": {"name": "p", "annotations": {v.COMPLETION_INDEX_KEY: "1"}},
           "status": {"phase": "Succeeded",
                      "initContainerStatuses": [{"name": "agent", "state": {"terminated": {
                          "exitCode": 0, "message": "m", "finishedAt": "2024-01-01T00:00:00Z"}}}],
                      "containerStatuses": [{"name": "verifier", "state": {"terminated": {
                          "exitCode": 0, "message": "v"}}}]}}
    f = pod_facts(pod)
    assert f.termination_message == "v" and f.agent.message == "m" and f.agent.state == "terminated"
    pod["status"]["initContainerStatuses"][0]["state"] = {"waiting": {"reason": "ErrImagePull"}}
    assert pod_facts(pod).waiting_reason == "ErrImagePull"


def test_crashed_agent_is_graded_and_forged_rewards_ignored():
    a = log(ev("ready", T0 + 1), ev("reward", T0 + 2, reward=1))
    w = log(ev("reward", T0 + 8, reward=0))
    r = judge_verified(facts(agent=agent(code=3)), a, w, agent_tail="Traceback")
    assert r.outcome == v.OUTCOME_SUCCEEDED and r.reward == 0 and v.FLAG_AGENT_REWARD_IGNORED in r.flags
    assert r.agent == {"exit_code": 3, "timed_out": False, "output_tail": "Traceback"}
    row = r.to_row(T0)
    assert EpisodeResult.from_row(row).agent == r.agent


# A verifier that started and failed had the agent's work in front of it: the agent's failure.
@pytest.mark.parametrize("case, reason, outcome", [
    ("verifier-exit", v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED),
    ("verifier-two-rewards", v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED),
    ("verifier-identity", v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED),
    ("verifier-deadline", v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED),
    ("agent-deadline", v.EP_TIMEOUT, v.OUTCOME_FAILED),
    ("no-record", v.EP_NON_ZERO_EXIT, v.OUTCOME_FAILED),
    ("launcher-failed", v.EP_NON_ZERO_EXIT, v.OUTCOME_FAILED),
    ("no-ready", v.EP_NO_READY, v.OUTCOME_FAILED),
    ("ready-after-reward", v.EP_REWARD_BEFORE_READY, v.OUTCOME_FAILED),
])
def test_verified_reasons(case, reason, outcome):
    a, w, f = log(ev("ready", T0 + 1)), log(ev("reward", T0 + 8, reward=1)), facts(agent=agent())
    if case == "verifier-exit":
        f = facts(agent=agent(), phase="Failed", exit_code=1)
    elif case == "verifier-two-rewards":
        w = log(ev("reward", T0 + 8, reward=1), ev("reward", T0 + 9, reward=1))
    elif case == "verifier-identity":
        w = log(ev("reward", T0 + 8, who="other", reward=1))
    elif case == "verifier-deadline":
        f = facts(agent=agent(), phase="Failed", exit_code=137, pod_reason="DeadlineExceeded")
    elif case == "agent-deadline":
        f = facts(agent=AgentFacts(state="running"), phase="Failed", exit_code=None, pod_reason="DeadlineExceeded")
    elif case == "no-record":
        f = facts(agent=AgentFacts(state="terminated", exit_code=0, message="forged"))
    elif case == "launcher-failed":
        f = facts(agent=AgentFacts(state="terminated", exit_code=120, message=""))
    elif case == "no-ready":
        a = log("nothing")
    elif case == "ready-after-reward":
        a = log(ev("ready", T0 + 9))
    r = judge_verified(f, a, w)
    assert (r.reason, r.outcome) == (reason, outcome), r.message
    row = r.to_row(T0)
    assert (row["valid"], row["reward"]) == (True, 0.0), row    # counted with the worst reward


def test_spec_verifier_defaults_and_checks():
    s = parse_spec({**BASE, "verifier": {"files": {"verify.py": "x"}}})
    assert s.verifier.image == s.image and s.verifier.mount_path == "/verifier"
    assert s.verifier.command == ("python", "-B", "/verifier/verify.py") and s.verifier.timeout_seconds == 300
    assert parse_spec(BASE).verifier is None
    for bad, field in (({"mountPath": "/task/v"}, "spec.task.mountPath"),
                       ({"typo": 1}, "spec.verifier"),
                       ({"env": [{"name": "EPISODE_ID", "value": "x"}]}, "spec.verifier.env"),
                       ({"timeoutSeconds": 3600}, "spec.verifier.timeoutSeconds"),
                       ({"files": {"..x": ""}}, "spec.verifier.files")):
        with pytest.raises(SpecError) as err:
            parse_spec({**BASE, "verifier": {"files": {"verify.py": "x"}, **bad}})
        assert err.value.field == field, (bad, err.value)


def test_manifests_with_a_verifier():
    ref = BatchRef("ns", "b", "0123456789abcdef")
    s = parse_spec({**BASE, "episodeTimeoutSeconds": 30, "verifier": {"files": {"verify.py": "x"}, "timeoutSeconds": 20,
                                                                      "resources": {"requests": {"cpu": "1"}}}})
    pod = manifests.job(ref, s, None)["spec"]["template"]["spec"]
    (agent_c,), (ver,) = pod["initContainers"], pod["containers"]
    assert agent_c["name"] == "agent" and ver["name"] == "verifier" and pod["activeDeadlineSeconds"] == 55
    assert not any(m["name"] == "verifier" for m in agent_c["volumeMounts"])     # never the agent's
    assert {"name": "verifier", "mountPath": "/verifier", "readOnly": True} in ver["volumeMounts"]
    assert "kill -KILL -1" in agent_c["command"][2] and "sleep 30" in agent_c["command"][2]
    # the verifier's own limit holds from its start (not the pod's), under its launcher
    assert ver["command"][:2] == ["/bin/sh", "-c"] and "sleep 20; trap \"\" TERM; kill -KILL $$verifier" in ver["command"][2]
    assert f"code={v.VERIFIER_TIMEOUT_EXIT}" in ver["command"][2] and "kill -KILL -1" in ver["command"][2]
    assert ver["args"] == ["python", "-B", "/verifier/verify.py"]
    assert manifests.verifier_configmap(ref, s, None)["data"] == {"verify.py": "x"}
    from rolloutbatch.core.admission import pod_resources
    assert str(pod_resources(s, None)["requests"]["cpu"]) == "1"          # the larger phase


def test_the_verifier_launcher_stops_a_hanging_verifier_at_its_timeout(tmp_path):
    """The launcher as a shell runs it, in a PID namespace of its own (its `kill -1` must never
    reach the host): a verifier that hangs, and a grandchild that left its session, are gone at
    timeoutSeconds, not at the pod's deadline; an exit code passes through."""
    import subprocess
    import time
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("needs unshare -p (a PID namespace)")
    script = launchers.verifier_launcher("", 1)
    script = script.replace("$$", "$")

    def run(*argv):
        started = time.monotonic()
        done = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "v", *argv],
                              capture_output=True, timeout=30)
        return done.returncode, time.monotonic() - started
    code, took = run("sh", "-c", "setsid sleep 60 & sleep 60")
    assert code == v.VERIFIER_TIMEOUT_EXIT and took < 5
    assert run("sh", "-c", "exit 3")[0] == 3 and run("true")[0] == 0


def _needs_pid_namespace():
    import subprocess
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("needs unshare -p (a PID namespace)")


def test_a_spec_path_without_the_standard_directories_leaves_the_watchdogs_their_sleep(tmp_path):
    """spec.env may set PATH to the agent's own directories only (a `$(PATH)` in it is not
    expanded: the image's PATH is not in the container's env). The watchdogs' `sleep` was looked
    up there: not found, the agent was killed at once and every episode was a Timeout, and a
    hanging verifier was never stopped. Run in a PID namespace of its own (`kill -1`)."""
    import subprocess
    import time
    from rolloutbatch.core import naming
    _needs_pid_namespace()
    term = tmp_path / "termination-log"
    term.write_text("")
    env = {"PATH": "/opt/venv/bin:$(PATH)"}

    def run(script, *argv):
        script = script.replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(term))
        started = time.monotonic()
        done = subprocess.run([shutil.which("unshare"), "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "l",
                               *argv], capture_output=True, timeout=60, env=env)
        return done.returncode, time.monotonic() - started

    code, took = run(launchers.agent_launcher("", 30), "/bin/sh", "-c", "exec 2>/dev/null; read x < /proc/uptime; "
                     "/bin/sleep 1; exit 3")
    assert code == 0 and took >= 1, (code, took)
    assert split_agent_record(term.read_text())[1] == {"exit_code": 3, "timed_out": False}
    code, took = run(launchers.verifier_launcher("", 1), "/bin/sleep", "60")
    assert code == v.VERIFIER_TIMEOUT_EXIT and took < 10, (code, took)


# Works on well past episodeTimeoutSeconds + VERIFIER_SLACK_SECONDS + the skew tolerance.
_KILL_WATCHDOG = kills_its_watchdog(2, 'sleep 9; echo solved > "$WORK/answer"; exit 0')


@pytest.mark.parametrize("with_date", [True, False], ids=["image-with-date", "image-without-date"])
def test_a_job_pods_agent_that_outlives_its_watchdog_is_its_timeout_and_never_graded(tmp_path, with_date):
    """The agent's user is its watchdog's: killed, the agent would work on into the verifier's
    share of the pod's deadline. The Job's launcher fails the agent's container as a pool's does
    (AGENT_OVERRAN_EXIT), the Job fails the index on it, and the verdict is the agent's Timeout,
    whatever the verifier did; also in an image without `date` (the launcher's clock is the
    kernel's uptime, read by the shell). Run in a PID namespace of its own (its `kill -1` must
    never reach the host), its termination message redirected to a temporary file."""
    import subprocess
    from rolloutbatch.core import naming
    from rolloutbatch.core.verdict import is_infrastructure_failure
    _needs_pid_namespace()
    spec = parse_spec({**BASE, "episodes": 1, "episodeTimeoutSeconds": 2,
                       "verifier": {"files": {"verify.py": "pass"}, "timeoutSeconds": 60}})
    command, _ = manifests._command(spec)
    assert command[:2] == ["/bin/sh", "-c"]
    term = tmp_path / "termination-log"
    term.write_text("")
    script = command[2].replace("$$", "$").replace(naming.TERMINATION_MESSAGE_PATH, str(term))
    path = "/usr/bin:/bin"
    if not with_date:   # the image's tools, but no date
        tools = tmp_path / "bin"
        tools.mkdir()
        for tool in ("sleep", "cat", "tr", "cut", "chmod"):
            (tools / tool).symlink_to(shutil.which(tool))
        path = str(tools)
    done = subprocess.run([shutil.which("unshare"), "-p", "-f", "--mount-proc", "/bin/sh", "-c", script, "rolloutbatch-agent",
                           "/bin/sh", "-c", _KILL_WATCHDOG], capture_output=True, timeout=60,
                          env={"PATH": path, "WORK": str(tmp_path)})
    assert (tmp_path / "answer").read_text() == "solved\n"       # it worked ~9 s on a 2 s limit
    assert done.returncode == v.AGENT_OVERRAN_EXIT, (done.returncode, done.stderr)
    assert split_agent_record(term.read_text())[1] == {"exit_code": 0, "timed_out": True}
    # the Job fails the index on it: the agent's container is judged before the verifier's
    rules = manifests.job(BatchRef("ns", "b", "0123456789abcdef"), spec, None)["spec"]["podFailurePolicy"]["rules"]
    judged = [(r["action"], r["onExitCodes"]["containerName"]) for r in rules if "onExitCodes" in r]
    assert judged == [("FailIndex", naming.AGENT_CONTAINER), ("FailIndex", naming.VERIFIER_CONTAINER)]
    stolen = AgentFacts(state="terminated", exit_code=done.returncode, message=term.read_text(), finished_at=T0 + 9)
    ready = log(ev("ready", T0 + 0.5))
    # as a kubelet shows it (a failed init container: the verifier never started), and as if the
    # verifier had graded the work done in the stolen time
    never_graded = facts(agent=stolen, phase="Failed", exit_code=None, terminated_reason=None, started_at=None,
                         finished_at=None, waiting_reason="PodInitializing")
    graded = facts(agent=stolen, started_at=T0 + 9, finished_at=T0 + 10)
    for f, verifier_log in ((never_graded, None), (graded, log(ev("reward", T0 + 9.5, reward=1)))):
        result = judge_verified(f, ready, verifier_log)
        assert (result.reason, result.outcome) == (v.EP_TIMEOUT, v.OUTCOME_FAILED), (result.message, result.flags)
        assert not is_infrastructure_failure(f)
        assert (result.to_row(T0)["valid"], result.to_row(T0)["reward"]) == (True, 0.0)    # counted, the worst


_OUTCOMES = {
    # a crashed agent whose work the verifier graded 0: a succeeded row
    v.OUTCOME_SUCCEEDED: lambda tail: judge_verified(
        facts(agent=agent(code=3)), log(ev("ready", T0 + 1)), log(ev("reward", T0 + 8, reward=0)), agent_tail=tail),
    v.OUTCOME_FAILED: lambda tail: judge_verified(
        facts(agent=agent(), exit_code=1, phase="Failed", terminated_reason="Error"), log(ev("ready", T0 + 1)), None,
        agent_tail=tail),
    v.OUTCOME_LOST: lambda tail: judge_verified(
        facts(agent=agent(), exit_code=None, phase="Pending", started_at=None, finished_at=None,
              terminated_reason=None, waiting_reason="ErrImagePull"), log(ev("ready", T0 + 1)), None, agent_tail=tail),
}


# Agent output of any length around the budgets (hypothesis keeps plain texts short): a piece of
# any text, control bytes and astral characters included, repeated.
_OUTPUT = st.one_of(st.text(max_size=300),
                    st.builds(lambda piece, times: piece * times, st.text(min_size=1, max_size=40),
                              st.integers(min_value=1, max_value=600)))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_OUTCOMES)), _OUTPUT)
def test_the_agents_tail_keeps_its_rows_budget(outcome, output):
    # The agent's output on a verified row is the row's too: 1 KiB of a success's, 4 KiB of a
    # failure's, counted as written in the results JSON, and always the end of what it printed.
    tail = log_tails.tail_of(output.encode(), v.LOG_TAIL_BYTES)   # what the judge reads
    result = _OUTCOMES[outcome](tail)
    assert result.outcome == outcome
    kept = result.agent.get("output_tail")
    assert kept == log_tails.kept(tail, outcome)
    if kept is not None:
        assert tail.endswith(kept)
        assert len(json.dumps(kept)) - 2 <= log_tails.budget(outcome)
    row = result.to_row(T0)
    assert row["agent"].get("output_tail") == kept
    assert {k: row["agent"][k] for k in ("exit_code", "timed_out")} == {k: result.agent[k] for k in ("exit_code", "timed_out")}


def test_a_success_keeps_no_more_of_the_agents_output_than_of_its_own_log():
    long = "0123456789" * 1000
    assert len(_OUTCOMES[v.OUTCOME_SUCCEEDED](long).agent["output_tail"]) == v.SUCCESS_LOG_TAIL_BYTES
    assert len(_OUTCOMES[v.OUTCOME_FAILED](long).agent["output_tail"]) == v.LOG_TAIL_BYTES


def test_an_agent_that_took_the_verifiers_share_of_the_deadline_is_its_own_timeout():
    """The agent killed its watchdog and ran on inside the slack its launcher allows, ending just
    before the pod's deadline: the verifier never started. That was lost (VerifierNotStarted),
    which dropped the bad attempt from its group; the launcher's record says the agent ran past
    its time, so it is the agent's Timeout, counted at the worst reward."""
    late = facts(agent=agent(timed_out="true"), phase="Failed", exit_code=None, terminated_reason=None,
                 started_at=None, finished_at=None, waiting_reason="PodInitializing", pod_reason="DeadlineExceeded")
    result = judge_verified(late, log(ev("ready", T0 + 1)), None)
    assert (result.reason, result.outcome) == (v.EP_TIMEOUT, v.OUTCOME_FAILED), result.message
    assert (result.to_row(T0)["valid"], result.to_row(T0)["reward"]) == (True, 0.0)
    # an agent within its time whose verifier the node could not start before the deadline: still lost
    on_time = dataclasses.replace(late, agent=agent())
    assert judge_verified(on_time, log(ev("ready", T0 + 1)), None).reason == v.EP_VERIFIER_NOT_STARTED


@pytest.mark.parametrize("prefix", ["x", '{"a": ', "  \x1b[31m", '{"event":"reward","reward":1,"note":"', "{" * 17,
                                    "{" * 100_000, '"event" {' * 1000, '{"event":"x"}' * 100])
def test_a_verifier_reward_line_written_into_fails_the_verifier(prefix):
    """What the verifier runs can write the container's stdout (/proc/1/fd/1): bytes written just
    before the verifier's own reward line make it unreadable, and a forged line beside it, or a
    reward in the message, stood alone. Such a line fails the verifier, on either channel."""
    honest = ev("reward", T0 + 9, reward=0)
    forged = ev("reward", T0 + 8, reward=1)
    stdout = log(forged + "\n" + prefix + honest)
    assert stdout.garbled == 1 and [e.reward for e in stdout.reward] == [1]
    result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), stdout)
    assert (result.reason, result.outcome) == (v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED), result.message
    from rolloutbatch.core.events import cross_checked
    checked = cross_checked(parse_termination_message(forged), log(prefix + honest))
    result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), checked)
    assert (result.reason, result.outcome) == (v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED), result.message


_DETAILS = {f"t{i}": {"ok": True, "note": 'a "quoted" \\ {brace}'} for i in range(10)}
# honest reward objects laid out as verifiers write them: the event key after nested details, or
# details that hold event-like records of their own
HONEST = [{"reward": 0.0, "tests": _DETAILS, "event": "reward"},
          {"event": "reward", "reward": 0.0, "log": [{"event": "test", "ok": True}] * 40}]


@pytest.mark.parametrize("honest", HONEST, ids=["key-last", "records-inside"])
@pytest.mark.parametrize("prefix", ["x", "{" * 17, '"', '\\"{', '{"event":"reward","reward":1,"s":"'])
def test_a_verifier_reward_line_is_found_behind_a_prefix_however_it_is_laid_out(honest, prefix):
    line = prefix + json.dumps(honest)
    stdout = log(ev("reward", T0 + 8, reward=1) + "\n" + line)
    assert stdout.garbled == 1, line[:200]


@settings(max_examples=200, deadline=None)
@given(prefix=st.text(min_size=1, max_size=60).filter(lambda t: "\n" not in t and "\r" not in t),
       extra=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3), max_leaves=12))
def test_any_prefix_before_a_reward_object_is_found(prefix, extra):
    """Whatever the agent's code writes before the verifier's reward line, the line holds an event."""
    from rolloutbatch.core.events import holds_event, parse_line
    line = (prefix + json.dumps({"event": "reward", "reward": 0.5, "extra": extra})).encode()
    if parse_line(line) is None:   # a prefix of blanks alone leaves an event of its own
        assert holds_event(line)


def test_a_reward_past_a_float_in_the_message_fails_the_verifier():
    """An int of 400 digits written into the (world-writable) message: compared with stdout's
    reward, it is one more reward (the cross-check raised OverflowError, ending the whole batch)."""
    from rolloutbatch.core.events import cross_checked
    forged = '{"event":"reward","reward":1' + "0" * 400 + ',"episode_id":"pod-0","at":%s}' % (T0 + 8)
    checked = cross_checked(parse_termination_message(forged), log(ev("reward", T0 + 9, reward=0)))
    assert len(checked.reward) == 2
    result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), checked)
    assert (result.reason, result.outcome) == (v.EP_VERIFIER_FAILED, v.OUTCOME_FAILED), result.message


def test_output_that_only_mentions_events_is_not_taken_for_a_written_into_line():
    """Test output quoting JSON (a verifier printing the events it checked, a diff) is not an
    event line of its own: only an object that is a ready or reward event counts."""
    quoted = ['assert {"event": "done"} == x', "E   '\"event\"' not in text", 'print("{")  # "event"',
              '{"event": "reward", "reward": 1, "episode_id": "p", "at": 1}']
    assert log("\n".join(quoted)).garbled == 0


def test_a_verifier_reward_line_wrapped_by_the_agents_code_is_not_a_forged_reward():
    """The agent's code writes an opening object before the verifier's reward object and a closing
    brace after it (the verifier wrote its newline apart): the line is one valid reward of the
    agent's (1), holding the verifier's own reward (0) among its fields. It was read as the
    verifier's reward and succeeded; it is the verifier's line written into: VerifierFailed. Also
    with the wrapper's kind escaped (its key then looks like no event to a text search)."""
    honest = ev("reward", T0 + 8, reward=0)
    for kind in ('"reward"', '"re\\u0077ard"'):
        prefix = '{"event":%s,"reward":1,"episode_id":"pod-0","at":%s,"graded":[' % (kind, T0 + 8)
        stdout = verifier_log(prefix + honest + "]}")
        assert stdout.garbled == 1 and stdout.reward == (), kind
        result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), stdout)
        assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), (kind, result.reward)
    # an event's own fields may hold records of other kinds; and an agent's own channel, which
    # nothing else writes, reads an event holding sub-rewards as any event
    assert verifier_log(ev("reward", T0 + 8, reward=1, tests=[{"event": "test", "ok": True}])).reward
    assert log(ev("reward", T0 + 8, reward=1, parts=[{"event": "reward", "name": "tests", "reward": 1}])).reward


@pytest.mark.parametrize("after", ['{"event"' * 40, '{"event":' * 40, "{" * 40 + '"event"' * 40])
def test_bytes_after_the_verifiers_reward_cannot_exhaust_the_written_into_search(after):
    """holds_event's case of an object with bytes after it too (its newline written apart): 40
    '{"event"' written after the verifier's reward exhausted the bounded search (32 tries from the
    last "event" key back), the line was not counted as written into, and a forged reward line
    stood alone and succeeded."""
    honest = ev("reward", T0 + 9, reward=0)
    stdout = log(ev("reward", T0 + 8, reward=1) + "\n" + "{" + honest + after)
    assert stdout.garbled == 1
    result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), stdout)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), (result.outcome, result.reward)


_FORGED = '{"event":%s,"reward":1,"episode_id":"pod-0","at":%s,"graded":'


@pytest.mark.parametrize("kind", ['"reward"', '"re\\u0077ard"'], ids=["plain", "escaped"])
@pytest.mark.parametrize("before, after", [
    ("[" * 70, "]" * 70 + "}"),          # nested deeper than a walk of the decoded value looked
    ("[" * 2000, "]" * 2000 + "}"),      # past the decoder's recursion limit: cut away as null
    ("", ',"graded":0}'),                # the wrapping key given again: the decoded value keeps the last
], ids=["deep", "past-recursion", "repeated-key"])
def test_a_wrapped_verifier_reward_cannot_be_hidden_from_the_wrap_check(kind, before, after):
    """The wrap above, with the verifier's object out of a decoded value's sight: nested deep,
    or overwritten by a repeated key (a hostile helper's second round). Events are counted as the
    decoder meets them, repeated keys' too, and an event key cut away with a too-deep part counts."""
    honest = ev("reward", T0 + 8, reward=0)
    stdout = verifier_log(_FORGED % (kind, T0 + 8) + before + honest + after)
    result = judge_verified(facts(agent=agent()), log(ev("ready", T0 + 1)), stdout)
    assert (result.outcome, result.reason) == (v.OUTCOME_FAILED, v.EP_VERIFIER_FAILED), (result.outcome, result.reward)


def test_deep_extras_naming_event_past_the_kept_depth_still_count():
    """The docstring: 'absurd nesting cannot raise ... the event still counts, its too-deep values
    read as null'. A deep extra holding the plain string "event" (no ready/reward object) now
    marks the line as wrapping one."""
    deep = "[" * 1200 + '"event"' + "]" * 1200
    line = ('{"event": "reward", "at": %s, "episode_id": "pod-0", "reward": 1, "trace": %s}' % (T0 + 2, deep)).encode()
    event = parse_line(line, 1)
    assert event is not None and not event.wraps_event
