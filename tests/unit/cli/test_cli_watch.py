"""cli.watch: following batches, on a terminal (rich progress bar) and as plain lines."""
from __future__ import annotations

import io

from rich.console import Console

from rolloutbatch.cli.watch import follow
from rolloutbatch.sdk import BatchHandle

RUNNING = {"phase": "Running", "episodes": 4, "succeededEpisodes": 1, "failedEpisodes": 0,
           "lostEpisodes": 2, "readyEpisodes": 1, "runningEpisodes": 1, "rewardSum": 1}
DONE = {"phase": "Failed", "episodes": 4, "succeededEpisodes": 1, "failedEpisodes": 1,
        "lostEpisodes": 2, "readyEpisodes": 2, "rewardSum": 1,
        "conditions": [{"type": "Stalled", "status": "True"}]}


class FakeClient:
    def __init__(self, statuses):
        self.statuses = list(statuses)

    def get(self, name, namespace):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name, "namespace": namespace, "uid": "u"}, "spec": {"episodes": 4},
                "status": status}


def _handle():
    return BatchHandle(FakeClient([RUNNING, DONE]), {"metadata": {"name": "b", "namespace": "n", "uid": "u"},
                                                     "spec": {"episodes": 4}})


def test_plain_lines_count_lost_episodes():
    out = io.StringIO()
    follow([_handle()], Console(file=out, force_terminal=False, width=200), timeout=5, interval=0)
    assert out.getvalue().splitlines() == [
        "b: Running 3/4 finished, running 1, failed 0, lost 2, reward 1",
        "b: Failed 4/4 finished, running 0, failed 1, lost 2, reward 1",
    ]


def test_live_bar_counts_lost_episodes():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    follow([_handle()], console, timeout=5, interval=0)
    final = out.getvalue().rsplit("\r", 1)[-1]
    assert "4/4" in final and "lost 2" in final and "failed 1" in final
