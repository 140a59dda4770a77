"""kube.watch.LoopInbox: watch-thread items reach the loop in order, one wake-up per burst."""
import asyncio
import threading

from rolloutbatch.kube.watch import LoopInbox


def test_a_burst_from_a_thread_is_delivered_in_order_with_few_wakeups():
    async def main():
        loop = asyncio.get_running_loop()
        seen, wakeups = [], []
        inbox = LoopInbox(loop, lambda *item: seen.append(item))
        real = loop.call_soon_threadsafe

        def counting(callback, *args):
            wakeups.append(1)
            return real(callback, *args)
        loop.call_soon_threadsafe = counting
        producer = threading.Thread(target=lambda: [inbox.put("uid", n, False) for n in range(5000)])
        producer.start()
        await asyncio.to_thread(producer.join)
        for _ in range(100):
            if len(seen) == 5000:
                break
            await asyncio.sleep(0.01)
        return seen, len(wakeups)

    seen, wakeups = asyncio.run(main())
    assert seen == [("uid", n, False) for n in range(5000)]
    assert 1 <= wakeups < 5000      # items queued behind a pending delivery wake nothing


def test_everything_put_within_the_window_is_one_wakeup_and_one_delivery():
    async def main():
        loop = asyncio.get_running_loop()
        batches, wakeups = [], []
        inbox = LoopInbox(loop, lambda n: batches.append(n), window=2.0)
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda cb, *a: (wakeups.append(1), real(cb, *a))[1]
        for n in range(100):
            inbox.put(n)
            await asyncio.sleep(0.001)      # spread over ~0.1-0.5 s, inside the window
        seen_early = list(batches)
        await asyncio.sleep(2.5)
        return seen_early, batches, len(wakeups)

    seen_early, batches, wakeups = asyncio.run(main())
    assert seen_early == [] and batches == list(range(100)) and wakeups == 1


def test_an_item_that_fails_to_deliver_does_not_drop_the_rest(caplog):
    async def main():
        seen = []

        def deliver(n):
            if n == 1:
                raise RuntimeError("bad event")
            seen.append(n)
        inbox = LoopInbox(asyncio.get_running_loop(), deliver, window=0.0)
        for n in range(3):
            inbox.put(n)
        await asyncio.sleep(0.05)
        inbox.put(3)       # a later burst is scheduled again
        await asyncio.sleep(0.05)
        return seen

    assert asyncio.run(main()) == [0, 2, 3]
    assert "Delivering a watch event failed" in caplog.text


def test_a_put_the_loop_refused_does_not_leave_later_items_waiting_forever():
    loop = asyncio.new_event_loop()
    seen = []
    inbox = LoopInbox(loop, lambda *item: seen.append(item))
    real, refuse = loop.call_soon_threadsafe, [True]

    def flaky(callback, *args):
        if refuse.pop() if refuse else False:
            raise RuntimeError("Event loop is closed")
        return real(callback, *args)
    loop.call_soon_threadsafe = flaky
    try:
        inbox.put("first")
    except RuntimeError:
        pass
    inbox.put("second")          # schedules a delivery again: nothing stays pending for good
    loop.run_until_complete(asyncio.sleep(0.2))
    loop.close()
    assert seen == [("first",), ("second",)]
