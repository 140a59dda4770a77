"""`rolloutbatch watch` (and `submit --watch`) prints a finished batch's status.message literally.

The operator's message quotes what the user wrote: a batch the CRD accepts with
``spec.podTemplate.nodeSelector: {disk: "[/fast]"}`` ends Failed/InvalidSpec saying "'[/fast]' is
not a valid label value". Printed through rich with markup on, ``[/fast]`` was read as a closing
tag that matches no open tag (``rich.errors.MarkupError``: a traceback instead of the summary),
and ``[bold]`` or ``[link=...]`` would restyle the message and lose its text.
"""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from rolloutbatch.cli.summary import print_summaries
from rolloutbatch.core.model import SpecError
from rolloutbatch.core.spec_pod_template import checked_pod_template


class _Handle:
    name, namespace = "b", "n"

    def __init__(self, status):
        self.status = status
        self.obj = {"metadata": {"name": "b", "namespace": "n", "uid": "u"}, "status": status}


def _invalid_spec_message() -> str:
    with pytest.raises(SpecError) as caught:
        checked_pod_template({"nodeSelector": {"disk": "[/fast]"}})
    return str(caught.value)


def test_status_message_with_brackets_is_printed_verbatim():
    message = _invalid_spec_message()
    assert "[/fast]" in message
    status = {"phase": "Failed", "reason": "InvalidSpec", "message": message, "episodes": 2,
              "conditions": [{"type": "Stalled", "status": "True", "reason": "InvalidSpec"}]}
    out = io.StringIO()
    print_summaries(Console(file=out, width=400, force_terminal=False), [_Handle(status)])
    assert message in out.getvalue()


def test_messages_and_failure_rows_cannot_move_the_terminal_cursor():
    """The status message and the results rows' messages are printed escaped, one line each: a row
    quotes episode text, and a status or a results ConfigMap is anyone's with write access."""
    hostile = "\x1b[2J\x1b]0;pwned\x07\x9b1A\u202e"
    status = {"phase": "Failed", "message": f"done{hostile}", "episodes": 2, "failedEpisodes": 1}

    class Handle(_Handle):
        def document(self):
            return {"episodes": 2, "pods": [{"index": 0, "pod": f"p0{hostile}", "outcome": "failed",
                                             "reason": f"NonZeroExit{hostile}", "message": f"exit 3{hostile}\nforged"}]}

    out = io.StringIO()
    print_summaries(Console(file=out, width=400, force_terminal=False), [Handle(status)])
    text = out.getvalue()
    assert all(line.isprintable() for line in text.splitlines()), repr(text)
    shown = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b1A\\u202e"
    assert f"done{shown}" in text and f"exit 3{shown} forged" in text and f"NonZeroExit{shown}" in text
