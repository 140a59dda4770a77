"""The messages of the Events the operator posts on a batch or pool (handlers.batches)."""
from hypothesis import given
from hypothesis import strategies as st

from rolloutbatch.handlers.batches import EVENT_MESSAGE_LIMIT, event_message


def test_a_non_ascii_message_is_cut_by_bytes_not_characters():
    """Messages were cut at 1024 characters: 1024 characters of non-ASCII text (a pod name is
    ASCII, but an exception's text or an episode's output quoted in a message need not be) are up
    to 4 KiB, four times the events.k8s.io/v1 bound on a note. The cut is now by UTF-8 bytes and
    never splits a character."""
    message = "épisode " + "日本語" * 600
    cut = event_message(message)
    assert len(cut.encode()) <= EVENT_MESSAGE_LIMIT < len(message[:EVENT_MESSAGE_LIMIT].encode())
    assert message.startswith(cut) and len(cut.encode()) > EVENT_MESSAGE_LIMIT - 4   # only a partial character lost


@given(st.text())
def test_any_message_fits_and_is_a_prefix(message):
    cut = event_message(message)
    assert len(cut.encode(errors="replace")) <= EVENT_MESSAGE_LIMIT
    if not any("\ud800" <= c <= "\udfff" for c in message):   # a lone surrogate becomes "?"
        assert message.startswith(cut)


def test_a_short_message_is_kept_whole():
    assert event_message("pod p-0 evicted") == "pod p-0 evicted"
