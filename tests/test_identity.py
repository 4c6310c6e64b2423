"""How session ids and idempotency keys are checked."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crew import ids
from crew.errors import UsageError


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_an_accepted_session_id_is_one_line_of_printable_text(text: str) -> None:
    try:
        ids.check_session(text)
    except UsageError:
        return
    assert 1 <= len(text) <= 256
    assert text.isprintable() and text == text.strip()
    assert "\n" not in text and text.encode("utf-8")
