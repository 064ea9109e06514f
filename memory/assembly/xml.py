"""XML helpers for context sections: well-formed whatever the content.

Sections are fed to the model as XML, and their content comes from places an attacker can
write to (user messages, tool output, files the agent edits). So every piece of text goes
through ``escape_text``/``escape_attr``: ``&``, ``<`` and ``>`` are escaped (so ``</known_facts>``
or ``]]>`` inside content stays content and cannot close a tag), quotes are escaped in
attributes, and characters that XML 1.0 forbids (NUL, the other C0 controls, lone surrogates,
U+FFFE/U+FFFF) are removed. Tag and attribute names are never taken from content: they are
checked against a strict pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Everything outside the XML 1.0 ``Char`` production: C0 controls other than \t \n \r,
# surrogates (which only appear in Python strings as unpaired halves) and U+FFFE/U+FFFF.
_ILLEGAL_XML_CHARS = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_WHITESPACE = re.compile(r"\s+")

# Replaced one after another, "&" first (so no entity is escaped twice): str.replace runs ten
# times faster than str.translate with a mapping, and escaping runs on every recalled line.
_TEXT_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
# Attribute values also escape quotes, and whitespace controls so a parser's attribute-value
# normalisation does not silently turn a newline into a space.
_ATTR_ESCAPES = (*_TEXT_ESCAPES, ('"', "&quot;"), ("'", "&apos;"), ("\n", "&#10;"), ("\r", "&#13;"), ("\t", "&#9;"))


def _replace_all(text: str, escapes: tuple[tuple[str, str], ...]) -> str:
    for char, entity in escapes:
        if char in text:
            text = text.replace(char, entity)
    return text


def strip_illegal(text: str) -> str:
    """``text`` without the characters XML 1.0 does not allow (NUL, other C0 controls, ...)."""
    return _ILLEGAL_XML_CHARS.sub("", text)


def escape_text(text: str | None) -> str:
    """``text`` made safe as XML character data."""
    return _replace_all(strip_illegal(text or ""), _TEXT_ESCAPES)


def escape_attr(value: object) -> str:
    """``value`` (as ``str``) made safe inside a double- or single-quoted attribute value."""
    return _replace_all(strip_illegal(str(value)), _ATTR_ESCAPES)


def check_name(name: str) -> str:
    """Return ``name`` if it is a plain XML name this module will emit, else raise ValueError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.lower().startswith("xml"):
        raise ValueError(f"{name!r} is not an allowed XML tag or attribute name")
    return name


def attributes(attrs: Mapping[str, object] | None) -> str:
    """`` a="1" b="x"`` for the non-None values of ``attrs``, in the given order."""
    if not attrs:
        return ""
    return "".join(f' {check_name(k)}="{escape_attr(v)}"' for k, v in attrs.items() if v is not None)


def element(tag: str, text: str | None = "", *, attrs: Mapping[str, object] | None = None) -> str:
    """One element whose content is ``text`` escaped: ``<tag a="v">text</tag>``."""
    check_name(tag)
    return f"<{tag}{attributes(attrs)}>{escape_text(text)}</{tag}>"


def wrap(tag: str, children: Iterable[str], *, attrs: Mapping[str, object] | None = None) -> str:
    """An element around already-rendered children (each produced by ``element``/``wrap``).

    Children are trusted to be well-formed because they come from this module; raw content
    must go through ``element`` instead.
    """
    check_name(tag)
    body = "\n".join(children)
    return f"<{tag}{attributes(attrs)}>\n{body}\n</{tag}>" if body else f"<{tag}{attributes(attrs)}></{tag}>"


def one_line(text: str | None) -> str:
    """``text`` with every run of whitespace collapsed to one space, for excerpts."""
    return _WHITESPACE.sub(" ", text or "").strip()


def excerpt(text: str | None, *, max_chars: int) -> str:
    """A one-line excerpt of at most ``max_chars`` characters, ending in ``…`` when cut."""
    line = one_line(text)
    if len(line) <= max_chars:
        return line
    cut = line[: max(0, max_chars - 1)]
    # Cut on a word boundary when one is reasonably close, so excerpts don't end mid-word.
    space = cut.rfind(" ")
    if space >= max_chars * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"
