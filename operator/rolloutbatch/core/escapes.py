"""An episode's text made safe for a terminal: every character that is not printable is
written escaped, as Python's ``repr`` writes it (``\\x1b``, ``\\x85``, ``\\u2028``, ``\\u202e``).

An episode's bytes reach people's terminals: its log and the end its row keeps (``rolloutbatch
logs``), and any of its text an operator message quotes (a row's message, an Event that
``kubectl describe`` shows raw). A terminal acts on ESC and the C1 controls (clear the screen,
move the cursor and rewrite the lines above, set the window title, OSC 52 writes the clipboard),
U+2028/2029 break lines and the bidi controls reorder what is shown. "Not printable" is Python's
``str.isprintable``: the Unicode categories Other (Cc, Cf, Cs, Co, Cn) and Separator but the
ASCII space, which holds all of those.

Pure.
"""

from __future__ import annotations


def escaped(text: str, keep: str = "") -> str:
    """``text`` with every non-printable character but those in ``keep`` escaped (a log keeps
    its lines: ``keep="\\n\\t"``; a name quoted into a one-line message keeps none)."""
    return "".join(c if c in keep or c.isprintable() else repr(c)[1:-1] for c in text)
