"""Log parsing survives hostile output and keeps only our events."""
import itertools
import json
import math
import string

import pytest

from rolloutbatch.core.events import MAX_EXTRA_BYTES, MAX_EXTRA_FIELD_BYTES, parse_log, parse_line


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


def test_many_small_extras_stay_within_the_budget_as_written():
    """Each field is counted with its ':' and ',': four thousand one- and two-letter fields in one
    ordinary line (31 KB) were kept whole and written 19,234 bytes against a 16 KiB budget."""
    keys = ["".join(p) for n in (1, 2) for p in itertools.product(string.ascii_letters, repeat=n)][:4000]
    parsed = parse_log(json.dumps({"event": "reward", "at": 1, "episode_id": "p", "reward": 1,
                                   **{k: 0 for k in keys}}, separators=(",", ":")).encode())
    extra = parsed.reward[0].extra
    assert len(json.dumps(extra, separators=(",", ":"))) <= MAX_EXTRA_BYTES
    assert len(extra) > 2000 and parsed.reward[0].dropped   # filled to the budget, the rest named


def test_a_field_at_the_field_limit_as_written_is_kept():
    value = "v" * (MAX_EXTRA_FIELD_BYTES - len('"k":""'))
    assert parse_log(line(event="reward", at=1, episode_id="p", reward=1, k=value)).reward[0].extra == {"k": value}
    assert parse_log(line(event="reward", at=1, episode_id="p", reward=1, k=value + "v")).reward[0].extra == {}


def test_ids_that_are_not_strings_are_dropped():
    assert parse_line(line(event="ready", at=1, episode_id=["p"])).episode_id is None


def test_truncation_is_reported():
    assert parse_log(b"", truncated=True).truncated


HOSTILE = [
    ("huge integer at", b'{"event": "ready", "at": 1' + b"0" * 400 + b', "episode_id": "p"}'),
    ("huge integer reward", b'{"event": "reward", "at": 1, "episode_id": "p", "reward": 1' + b"0" * 400 + b"}"),
    ("too many digits", b'{"event": "reward", "at": 1, "reward": 1' + b"0" * 5000 + b"}"),
    ("1e400", b'{"event": "reward", "at": 1e400, "episode_id": "p", "reward": 1e400}'),
    ("deep nesting top level", b"[" * 200000),
    ("deep nesting in extras", b'{"event": "reward", "x": ' + b"[" * 900 + b"]" * 900 + b"}"),
    ("one 1 MiB line", b'{"event": "ready", "pad": "' + b"z" * (1 << 20) + b'"}'),
    ("invalid utf-8", b"\xc3\x28\xa0\xa1{\"event\": \"ready\"}\xff"),
    ("nul bytes", b'{"event": "ready", "at": 1, "episode_id": "p\x00"}\x00\x00'),
    ("event not a string", b'{"event": ["ready"], "at": 1}'),
    ("not an object", b'"ready"\n42\nnull\ntrue'),
    ("duplicate keys", b'{"event": "ready", "event": "reward", "at": 1}'),
    ("lone surrogate", b'{"event": "ready", "episode_id": "\\ud800"}'),
    ("crlf lines", b'{"event": "ready", "at": 1, "episode_id": "p"}\r\n'),
    ("empty", b""),
]


@pytest.mark.parametrize("name,data", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_table_never_raises(name, data):
    parsed = parse_log(data)
    assert parsed.bytes_read == len(data)
    for event in parsed.ready + parsed.reward:
        assert event.at is None or math.isfinite(event.at)


def test_a_huge_integer_at_becomes_none_and_reward_stays_raw():
    parsed = parse_log(HOSTILE[1][1])
    assert parsed.reward[0].at == 1.0 and isinstance(parsed.reward[0].reward, int)
    assert parse_log(HOSTILE[0][1]).ready[0].at is None


def test_overlong_lines_are_not_parsed_even_when_valid():
    parsed = parse_log(line(event="ready", at=1, episode_id="p", pad="x" * 100), max_line_bytes=50)
    assert parsed.ready == () and "longer than 50" in parsed.problems[0]


def test_event_floods_keep_memory_flat():
    from rolloutbatch.core.events import MAX_EVENTS_PER_KIND
    one = line(event="ready", at=1, episode_id="p") + b"\n" + line(event="reward", at=2, episode_id="p") + b"\n"
    parsed = parse_log(one * 1_000_000)      # ~90 MB, stops once both kinds overflowed
    assert len(parsed.ready) == len(parsed.reward) == MAX_EVENTS_PER_KIND + 1
    assert any("not kept" in p for p in parsed.problems)
    flood = parse_log((line(event="ready", at=1, episode_id="p") + b"\n") * 100_000)   # no reward: read to the end
    assert len(flood.ready) == MAX_EVENTS_PER_KIND + 1 and flood.reward == ()


def test_events_carry_their_line_number():
    parsed = parse_log(b"noise\n" + line(event="reward", at=2, episode_id="p", reward=1) + b"\n\n"
                       + line(event="ready", at=1, episode_id="p"))
    assert (parsed.reward[0].line, parsed.ready[0].line) == (2, 4)


def test_non_finite_extras_become_null():
    # What the reward event carries ends up in results.json, which is strict JSON.
    parsed = parse_log(b'{"event": "reward", "at": 1, "episode_id": "p", "reward": 1, "s": NaN, '
                       b'"l": [Infinity, 1, {"x": -Infinity}], "big": 1' + b"0" * 400 + b"}")
    assert parsed.reward[0].extra == {"s": None, "l": [None, 1, {"x": None}], "big": None}
    json.dumps(parsed.reward[0].extra, allow_nan=False)


def test_carriage_returns_do_not_split_lines():
    parsed = parse_log(b"progress 10%\rprogress 100%\r" + line(event="ready", at=1, episode_id="p") + b"\r\n")
    assert parsed.ready == ()          # the event is inside the progress bar's line, as a kubelet splits
    assert parse_log(line(event="ready", at=1, episode_id="p") + b"\r\n").ready[0].line == 1


def test_only_whole_objects_naming_event_are_decoded(monkeypatch):
    from rolloutbatch.core import events
    calls = []
    real = events.json.loads
    monkeypatch.setattr(events.json, "loads", lambda *a, **k: calls.append(1) or real(*a, **k))
    hostile = b"{\n" * 100_000 + b'{"x": 1}\n' * 1000 + line(event="ready", at=1.0, episode_id="p")
    parsed = parse_log(hostile)
    assert len(parsed.ready) == 1 and len(calls) == 1      # a million failed decodes took seconds


def test_the_extras_budget_counts_keys_as_written():
    # a CJK key is 1 character and 6 bytes as JSON writes it (\uXXXX): two of 4,000 kept 48 KB
    record = {"event": "reward", "at": 1, "episode_id": "p", "reward": 1}
    record |= {"\u4e00" * 4000 + str(n): 0 for n in range(2)}
    parsed = parse_log(json.dumps(record).encode())
    assert len(json.dumps(parsed.reward[0].extra)) <= MAX_EXTRA_BYTES


# What a terminal acts on: C0 (ESC, BEL, newline), DEL, C1 (CSI, NEL), the line and paragraph
# separators, the bidi override and isolate controls; escaped as Python's repr writes them.
TERMINAL_CONTROLS = {"\x1b[2J": "\\x1b[2J", "\x07": "\\x07", "\n\t": "\\n\\t", "\x7f": "\\x7f", "\x9b2J": "\\x9b2J",
                     "\x85": "\\x85", "\u2028\u2029": "\\u2028\\u2029", "\u202e\u2066": "\\u202e\\u2066"}


def test_escaped_text_holds_nothing_a_terminal_acts_on():
    from rolloutbatch.core.escapes import escaped
    for raw, shown in TERMINAL_CONTROLS.items():
        assert escaped(f"a{raw}é") == f"a{shown}é"
    assert escaped("one\ttwo\nthree\x1b", keep="\n\t") == "one\ttwo\nthree\\x1b"
    assert escaped("\ud800") == "\\ud800"          # a lone surrogate: strict JSON too


def test_the_names_of_dropped_extras_are_kept_escaped():
    """They are quoted into the row's message and an Event (kubectl describe shows it raw)."""
    names = [f"n{i}{raw}" for i, raw in enumerate(TERMINAL_CONTROLS)]
    event = parse_line(line(event="reward", at=1.0, reward=1, **{n: "x" * (MAX_EXTRA_FIELD_BYTES + 1) for n in names}))
    assert event.dropped == tuple(f"n{i}{shown}" for i, shown in enumerate(TERMINAL_CONTROLS.values()))


# -- valid JSON past Python's own limits: an int of 4,300 digits, nesting past the decoder's depth --
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rolloutbatch.core import vocabulary as v  # noqa: E402
from rolloutbatch.core.verdict import judge_episode
from rolloutbatch.core.pod_reading import pod_facts  # noqa: E402
from tests.unit.core.test_verdict import READY as V_READY, REWARD as V_REWARD, pod_json  # noqa: E402


def _line(event: dict, raw_extra: bytes = b"") -> bytes:
    text = json.dumps(event).encode()
    return text[:-1] + raw_extra + b"}" if raw_extra else text


HUGE_INT = b', "n": 1' + b"0" * 4400            # 4401 digits: valid JSON (RFC 8259 sets no bound)
DEEP = b', "n": ' + b"[" * 1500 + b"]" * 1500   # 3 KB, far under the 64 KiB line bound


def test_a_second_reward_holding_a_huge_int_is_still_a_duplicate():
    log = parse_log(b"\n".join([_line(V_READY), _line(V_REWARD), _line(V_REWARD, HUGE_INT)]))
    r = judge_episode(pod_facts(pod_json()), log)
    assert (r.outcome, r.reason) == ("failed", v.EP_DUPLICATE_REWARD), (r.outcome, r.reason)


def test_a_second_reward_nested_past_the_decoders_depth_is_still_a_duplicate():
    log = parse_log(b"\n".join([_line(V_READY), _line(V_REWARD), _line(V_REWARD, DEEP)]))
    r = judge_episode(pod_facts(pod_json()), log)
    assert (r.outcome, r.reason) == ("failed", v.EP_DUPLICATE_REWARD), (r.outcome, r.reason)


def test_a_reward_whose_extra_is_a_huge_int_or_too_deep_still_counts():
    # §4: extras "past that (or not JSON) are left out and said three ways" (RewardExtrasDropped);
    # the event itself counts.
    for raw in (HUGE_INT, DEEP):
        log = parse_log(b"\n".join([_line(V_READY), _line(V_REWARD, raw)]))
        r = judge_episode(pod_facts(pod_json()), log)
        assert (r.outcome, r.reason) == ("succeeded", None), (raw[:12], r.outcome, r.reason)


@settings(max_examples=60, deadline=None, database=None)
@given(depth=st.integers(990, 5000), second=st.booleans())
def test_nesting_never_hides_an_event(depth, second):
    raw = b', "n": ' + b"[" * depth + b"]" * depth
    lines = [_line(V_READY), _line(V_REWARD)] + ([_line(V_REWARD, raw)] if second else [])
    if not second:
        lines[1] = _line(V_REWARD, raw)
    log = parse_log(b"\n".join(lines))
    assert len(log.reward) == (2 if second else 1)


def test_extras_whose_names_become_one_as_strict_json_are_said_dropped_not_lost():
    """Lone surrogates are written as '?': of three names that become one, one is kept and the
    others are said dropped (RewardExtrasDropped), never lost without a word."""
    reward = (b'{"event":"reward","at":%r,"episode_id":"rb-1-3-abc","reward":1,"\\ud800":1,"\\ud801":2,"?":3}'
              % V_REWARD["at"])
    r = judge_episode(pod_facts(pod_json()), parse_log(json.dumps(V_READY).encode() + b"\n" + reward))
    assert r.outcome == v.OUTCOME_SUCCEEDED and list(r.extra) == ["?"]
    assert v.FLAG_EXTRAS_DROPPED in r.flags
