"""cli.watch: following batches, on a terminal (rich progress bar) and as plain lines."""
from __future__ import annotations

import io

from rich.console import Console

from rolloutbatch.cli.watch import follow
import pytest

from rolloutbatch.kube.errors import NotFound
from rolloutbatch.sdk import BatchHandle

RUNNING = {"phase": "Running", "episodes": 4, "succeededEpisodes": 1, "failedEpisodes": 0,
           "lostEpisodes": 2, "readyEpisodes": 1, "runningEpisodes": 1, "rewardSum": 1}
DONE = {"phase": "Failed", "episodes": 4, "succeededEpisodes": 1, "failedEpisodes": 1,
        "lostEpisodes": 2, "readyEpisodes": 2, "rewardSum": 1,
        "conditions": [{"type": "Stalled", "status": "True"}]}


class FakeClient:
    def __init__(self, statuses, uid="u"):
        self.statuses, self.uid = list(statuses), uid

    def get(self, name, namespace):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name, "namespace": namespace, "uid": self.uid}, "spec": {"episodes": 4},
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


@pytest.mark.parametrize("terminal", [False, True])
def test_a_failed_read_is_retried_on_the_board_and_in_plain_lines(terminal, monkeypatch, capsys):
    from rolloutbatch.cli import watch
    from rolloutbatch.kube.errors import Unavailable

    class Flaky(FakeClient):
        def get(self, name, namespace):
            if self.statuses[0] is None:
                self.statuses.pop(0)
                raise Unavailable("get RolloutBatch n/b: 502 Bad Gateway", status=502)
            return super().get(name, namespace)

    monkeypatch.setattr(watch, "RETRY_FIRST", 0.0)
    handle = BatchHandle(Flaky([None, RUNNING, None, DONE]), {"metadata": {"name": "b", "namespace": "n", "uid": "u"},
                                                             "spec": {"episodes": 4}})
    out = io.StringIO()
    follow([handle], Console(file=out, force_terminal=terminal, width=200), timeout=5, interval=0)
    assert handle.status["phase"] == "Failed" and "4/4" in out.getvalue()
    # on stderr; on the board, above it (rich's Live takes stderr while it draws)
    said = capsys.readouterr().err + out.getvalue()
    assert said.count("502 Bad Gateway); retrying in 0s") == 2 and said.count("the API server answers again") == 2


@pytest.mark.parametrize("terminal", [False, True])
def test_cli_watch_does_not_report_a_namesakes_success(terminal):
    """`rolloutbatch watch exp` (and submit --watch) polls by name: batch A deleted and a
    namesake succeeding made the watch print the namesake's summary and exit 0 for A."""
    handle = BatchHandle(FakeClient([{"phase": "Succeeded"}], uid="u-2"),
                         {"metadata": {"name": "b", "namespace": "n", "uid": "u"}, "spec": {"episodes": 4},
                          "status": {"phase": "Running"}})
    console = Console(file=io.StringIO(), force_terminal=terminal, width=200)
    with pytest.raises(NotFound, match="replaced by a namesake"):
        follow([handle], console, timeout=5, interval=0)
    assert handle.uid == "u" and handle.status == {"phase": "Running"}
