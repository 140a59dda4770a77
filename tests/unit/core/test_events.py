"""Log parsing survives hostile output and keeps only our events."""
import json
import math

import pytest

from rolloutbatch.core.events import MAX_EXTRA_BYTES, parse_log, parse_line


def line(**record):
    return json.dumps(record).encode()


def test_ready_and_reward_are_found_and_other_lines_ignored():
    log = b"\n".join([b"hello", line(event="ready", at=1.5, episode_id="p"), b"{not json",
                      line(event="other", at=2), b"[1, 2]",
                      line(event="reward", at=2.5, episode_id="p", reward=1, tests_exit=0)])
    parsed = parse_log(log)
    assert [e.kind for e in parsed.ready + parsed.reward] == ["ready", "reward"]
    assert parsed.reward[0].extra == {"tests_exit": 0} and parsed.ready[0].at == 1.5


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_rewards_are_kept_raw_for_the_verdict(token):
    parsed = parse_log(f'{{"event": "reward", "at": 1, "episode_id": "p", "reward": {token}}}'.encode())
    assert not math.isfinite(parsed.reward[0].reward)


def test_non_finite_or_missing_timestamps_become_none():
    parsed = parse_log(b'{"event": "ready", "at": NaN, "episode_id": "p"}\n{"event": "ready", "episode_id": "p"}')
    assert [e.at for e in parsed.ready] == [None, None]


def test_hostile_inputs_never_raise():
    deep = b'{"event": "reward", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    huge_line = b'{"event": "ready", "pad": "' + b"z" * 200000 + b'"}'
    garbage = bytes(range(256)) * 100
    parsed = parse_log(b"\n".join([deep, huge_line, garbage, b"\xff\xfe{\"event\":\"ready\"}"]))
    assert any("longer than" in p for p in parsed.problems)
    assert len(parsed.ready) <= 1


def test_invalid_utf8_in_an_id_is_replaced_not_fatal():
    event = parse_line(b'{"event": "ready", "at": 1, "episode_id": "pod\xff"}')
    assert event is not None and event.episode_id == "pod\ufffd"


def test_fifty_mib_log_is_parsed_in_bounded_time():
    data = (b"y" * 1023 + b"\n") * (50 * 1024)
    assert parse_log(data).bytes_read == len(data)


def test_extras_are_bounded():
    big = {f"k{i}": "v" * 3000 for i in range(10)}
    parsed = parse_log(line(event="reward", at=1, episode_id="p", reward=1, huge="x" * 5000, **big))
    extra = parsed.reward[0].extra
    assert "huge" not in extra and len(json.dumps(extra)) <= MAX_EXTRA_BYTES + 200


def test_ids_that_are_not_strings_are_dropped():
    assert parse_line(line(event="ready", at=1, episode_id=["p"])).episode_id is None


def test_truncation_is_reported():
    assert parse_log(b"", truncated=True).truncated
