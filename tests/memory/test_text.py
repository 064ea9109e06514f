from hypothesis import given, strategies as st

from memory.text import REPLACEMENT, is_storable, storable


def test_lone_surrogates_become_replacement_characters():
    assert storable("x\ud800y\udfffz") == f"x{REPLACEMENT}y{REPLACEMENT}z"


def test_valid_text_is_returned_unchanged():
    text = "naïve 😀 \x00 end"
    assert storable(text) is text


@given(st.text(alphabet=st.characters(codec=None)))
def test_any_python_string_becomes_utf8_encodable(text):
    result = storable(text)
    assert is_storable(result)
    result.encode("utf-8")
    assert len(result) == len(text)
    assert all(a == b or b == REPLACEMENT for a, b in zip(text, result))
