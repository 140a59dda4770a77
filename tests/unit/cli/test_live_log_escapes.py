"""`rolloutbatch logs NAME` shows a live pod's log escaped, as it shows a kept tail.

An episode whose agent prints ``\\x1b[3A\\x1b[2K==> other-pod <==`` and similar ANSI sequences
(cursor up, erase line) would, written raw, move the terminal's cursor: when every episode's log
is printed (each headed ``==> pod <==``) one episode could erase and overwrite the header and lines
of another's (forging what a person reads as another episode's result). Control characters but
newline and tab are printed escaped (``cli.logs.shown``), whichever source the log comes from.
"""
from __future__ import annotations

from rolloutbatch.cli import logs as cli_logs
from rolloutbatch.kube import resources
from tests.unit.cli.test_cli_follow import _run as run

HOSTILE = b'{"event": "ready"}\n\x1b[3A\x1b[2K==> forged-pod <==\n\x1b]0;title\x07reward 1.0\n'


def _pod(name):
    index = name.split("-")[1]   # as the Job controller annotates its pods
    return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"batch.kubernetes.io/job-completion-index": index}},
            "spec": {"containers": [{"name": "episode"}]}}


class Api:
    url = "https://127.0.0.1:6443"

    def get(self, path, what, **params):
        return {"items": [_pod("b-0-aaaaa"), _pod("b-1-bbbbb")]}


class Client:
    namespace, context = "n", "ctx"

    def __init__(self):
        self.obj = {"metadata": {"name": "b", "namespace": "n", "uid": "0123456789abcdef"},
                    "spec": {"episodes": 2}, "status": {"phase": "Running", "sandboxNamespace": "rb-0123456789"}}
        self.api = Api()

    def get(self, name, namespace=None):
        return self.obj


def test_a_live_log_cannot_move_the_terminal_cursor(capsys, monkeypatch):
    monkeypatch.setattr(resources, "read_log", lambda api, ns, name, container, limit: (HOSTILE, False))
    code, out, err = run(capsys, monkeypatch, Client(), "logs", "b")
    assert code == 0, err
    assert "==> b-0-aaaaa <==" in out
    # what the kept-tail path prints for the same bytes
    assert cli_logs.shown(HOSTILE.decode()) in out
    assert "\x1b" not in out and "\x07" not in out


def test_a_limit_below_one_byte_is_a_usage_error(capsys):
    import pytest

    from rolloutbatch.cli.main import main
    with pytest.raises(SystemExit) as exit_:
        main(["logs", "b", "--limit-bytes", "0"])
    assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err
