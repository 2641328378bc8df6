"""The id escaping every adapter shares (``evstore.integrations._names``): reversible, canonical,
and spelling each adapter's stored ids as it always has."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from evstore.integrations._names import escape, unescape


@given(st.binary(max_size=64), st.booleans())
def test_every_byte_string_round_trips_in_id_characters(data: bytes, upper: bool) -> None:
    part = escape(data, upper=upper)
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in part)
    assert unescape(part, upper=upper) == data


def test_each_adapter_keeps_the_case_its_stored_ids_have() -> None:
    assert escape(b"ana@example.com", upper=True) == "ana_40example_2Ecom"  # ADK
    assert escape(b"child:abc", upper=False) == "child_3aabc"  # LangGraph


def test_only_the_canonical_form_decodes() -> None:
    assert unescape("child_3aabc", upper=False) == b"child:abc"
    assert unescape("child_3Aabc", upper=False) is None  # the other case
    assert unescape("child_3aabc", upper=True) is None
    assert unescape("_41", upper=True) is None  # "A" is kept, never escaped
    for broken in ("_4", "_zz", "a.b", "é", "_h" + "0" * 40):
        assert unescape(broken, upper=False) is None
