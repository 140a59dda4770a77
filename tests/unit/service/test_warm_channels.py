"""The attaches a pool opens to its warm pods ahead of their claims (service.warm_channels), and
a pooled batch's hand-over through them (service.episode_delivery)."""
from __future__ import annotations

import asyncio
import logging

from rolloutbatch.core import naming
from rolloutbatch.kube.errors import Unavailable
from rolloutbatch.service import warm_channels
from rolloutbatch.service.warm_channels import WarmChannels
from tests.unit.service.memory_pool import (POOL_NS, batch_spec, claim_and_hand_over, pod_names, triple,
                                            warm_pool_with_channels)

C = naming.CONTAINER_NAME


class FakeChannel:
    def __init__(self, pod: str) -> None:
        self.pod, self.closed, self.delivered = pod, False, []

    @property
    def alive(self) -> bool:
        return not self.closed

    async def deliver(self, data: bytes, *, timeout: float) -> None:
        self.delivered.append(data)
        self.closed = True

    async def close(self) -> None:
        self.closed = True


class Opener:
    """Opens FakeChannels; ``gate`` holds every open until set; ``fail`` names pods that refuse."""

    def __init__(self) -> None:
        self.opened: list[FakeChannel] = []
        self.gate: asyncio.Event | None = None
        self.fail: set[str] = set()
        self.calls = 0

    async def __call__(self, namespace: str, pod: str, container: str) -> FakeChannel:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if pod in self.fail:
            raise Unavailable(f"attach to pod {namespace}/{pod}: refused")
        channel = FakeChannel(pod)
        self.opened.append(channel)
        return channel


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


def test_a_warm_pod_gets_one_channel_and_its_claim_takes_it():
    async def go():
        opener = Opener()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C), ("u2", "p2", C)])
        await settle()
        assert channels.open_for("u1") and channels.open_for("u2") and opener.calls == 2
        channels.keep("ns", [("u1", "p1", C), ("u2", "p2", C)])   # a round again: nothing new opened
        await settle()
        assert opener.calls == 2
        taken = await channels.take("u1", C)
        assert taken is opener.opened[0] and taken.alive and not channels.open_for("u1")
        channels.keep("ns", [("u1", "p1", C)])   # a round that listed it before its claim
        await settle()
        assert opener.calls == 2 and not channels.open_for("u1")   # never opened to again
        assert await channels.take("u1", C) is None
    run(go())


def test_a_pod_that_leaves_the_warm_set_has_its_channel_closed_and_others_keep_theirs():
    async def go():
        opener = Opener()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C), ("u2", "p2", C)])
        channels.keep("other", [("u3", "p3", C)])
        await settle()
        channels.keep("ns", [("u2", "p2", C)])
        await settle()
        closed = {c.pod: c.closed for c in opener.opened}
        assert closed == {"p1": True, "p2": False, "p3": False}
        await channels.close_namespace("ns")
        assert {c.pod: c.closed for c in opener.opened} == {"p1": True, "p2": True, "p3": False}
        assert len(channels) == 1
    run(go())


def test_a_take_waits_for_a_channel_still_opening():
    """Its pings must be over before the script goes: the take waits for the open, then has it."""
    async def go():
        opener = Opener()
        opener.gate = asyncio.Event()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C)])
        await settle()
        taking = asyncio.create_task(channels.take("u1", C))
        await settle()
        assert not taking.done()
        opener.gate.set()
        channel = await taking
        assert channel is opener.opened[0] and channel.alive
    run(go())


def test_closing_one_pools_channels_does_not_wait_for_anothers():
    """A pool's daemon ends (its deletion): it waits for its own closes, not for a close of another
    pool's channel that hangs (a server that no longer answers)."""
    async def go():
        opener = Opener()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C)])
        channels.keep("other", [("u2", "p2", C)])
        await settle()
        stuck = asyncio.Event()

        async def hang() -> None:
            await stuck.wait()
        opener.opened[1].close = hang
        channels.keep("other", [])   # p2 leaves the warm set: its close hangs
        await asyncio.wait_for(channels.close_namespace("ns"), 1.0)
        assert opener.opened[0].closed
        stuck.set()
        await settle()
    run(go())


def test_a_take_that_waits_too_long_cancels_the_opening(monkeypatch):
    monkeypatch.setattr(warm_channels, "TAKE_WAIT", 0.05)

    async def go():
        opener = Opener()
        opener.gate = asyncio.Event()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C)])
        await settle()
        assert await channels.take("u1", C) is None
        opener.gate.set()
        await settle()
        assert opener.opened == []   # cancelled: it never opened, so it cannot ping into the hand-over
    run(go())


def test_a_failed_open_waits_its_backoff_and_a_dead_channel_is_replaced(monkeypatch):
    async def go():
        opener = Opener()
        opener.fail = {"p1"}
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", C)])
        await settle()
        assert not channels.open_for("u1") and len(channels) == 0
        opener.fail = set()
        channels.keep("ns", [("u1", "p1", C)])   # the next round, within its backoff: not tried
        await settle()
        assert opener.calls == 1 and not channels.open_for("u1")
        monkeypatch.setattr(warm_channels, "FAILED_BACKOFF", 0.0)
        opener.fail = {"p2"}
        channels.keep("ns", [("u2", "p2", C)])
        await settle()
        opener.fail = set()
        channels.keep("ns", [("u2", "p2", C)])   # past its (zero) backoff: tried again
        await settle()
        assert channels.open_for("u2")
        opener.opened[-1].closed = True   # its connection ended (an idle timeout, a restart)
        channels.keep("ns", [("u2", "p2", C)])
        await settle()
        assert channels.open_for("u2") and [c.pod for c in opener.opened] == ["p2", "p2"]
    run(go())


def test_channels_are_bounded_and_opened_a_few_at_a_time():
    async def go():
        opener = Opener()
        opener.gate = asyncio.Event()
        channels = WarmChannels(opener, logging.getLogger("t"), max_open=5, opening_at_once=2)
        channels.keep("ns", [(f"u{i}", f"p{i}", C) for i in range(8)])
        await settle()
        assert len(channels) == 5 and opener.calls == 2   # the rest wait for a slot
        opener.gate.set()
        await settle()
        assert opener.calls == 5 and sum(channels.open_for(f"u{i}") for i in range(8)) == 5
    run(go())


def test_a_take_of_a_pod_still_queued_for_a_slot_does_not_wait(monkeypatch):
    """Nothing was sent to it yet: the claim opens its own attach at once instead of waiting for the
    opens ahead of it (a refill's, or some that hang)."""
    monkeypatch.setattr(warm_channels, "TAKE_WAIT", 30.0)

    async def go():
        opener = Opener()
        opener.gate = asyncio.Event()
        channels = WarmChannels(opener, logging.getLogger("t"), opening_at_once=1)
        channels.keep("ns", [("u1", "p1", C), ("u2", "p2", C)])
        await settle()
        assert opener.calls == 1   # p1 opens, p2 waits for the slot
        assert await asyncio.wait_for(channels.take("u2", C), 1.0) is None
        opener.gate.set()
        await settle()
        assert [c.pod for c in opener.opened] == ["p1"] and opener.calls == 1   # p2's open never began
    run(go())


def test_a_channel_to_another_container_is_not_used():
    async def go():
        opener = Opener()
        channels = WarmChannels(opener, logging.getLogger("t"))
        channels.keep("ns", [("u1", "p1", naming.AGENT_CONTAINER)])
        await settle()
        assert await channels.take("u1", C) is None
        assert opener.opened[0].closed
    run(go())


# -- on the API in memory: the pool opens them, the batch's hand-over uses them ----------------


def test_the_pools_round_opens_channels_and_the_hand_over_goes_through_them(api):
    scripts: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: scripts.append(stdin))

    async def go():
        channels = await warm_pool_with_channels(api, 2)
        assert sorted(c.pod for c in api.opened_channels) == sorted(pod_names(api))
        return await claim_and_hand_over(api, batch_spec(episodes=2, parallelism=2), channels)
    hits, _, fresh = triple(run(go()))
    assert hits == 2 and len(scripts) == 2 and len(api.opened_channels) == 2
    assert sorted(c.via_channel[0] for c in api.opened_channels) == sorted(scripts)   # no attach opened at the claim
    for pod in fresh:
        notes = api.get_object("Pod", pod["metadata"]["name"], POOL_NS)["metadata"]["annotations"]
        assert naming.ANNOTATION_DELIVERED_AT in notes


def test_a_pod_without_a_channel_is_handed_over_by_an_attach_of_its_own(api):
    scripts: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: scripts.append(stdin))

    async def go():
        await claim_and_hand_over(api, batch_spec(episodes=1, parallelism=1),
                                  await warm_pool_with_channels(api, 1, open_channels=False))
    run(go())
    assert len(scripts) == 1 and api.opened_channels == [] and len(api.attaches) == 1


def test_a_channel_that_died_after_the_round_is_closed_and_the_pod_handed_over_by_a_fresh_attach(api):
    """A channel whose connection ended (the keepalive found it silent, the API server restarted)
    between the pool's round and the claim is not written to: it is closed, and the hand-over
    opens an attach of its own, as for a pod without a channel."""
    scripts: list[bytes] = []
    api.set_attach(POOL_NS, None, lambda container, stdin: scripts.append(stdin))

    async def go():
        channels = await warm_pool_with_channels(api, 1)
        [channel] = api.opened_channels
        channel.closed = True   # as a connection that ended reads: not alive
        await claim_and_hand_over(api, batch_spec(episodes=1, parallelism=1), channels)
        return channel
    channel = run(go())
    assert channel.via_channel == [] and len(scripts) == 1   # not written to: a fresh attach carried it
