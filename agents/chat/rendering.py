"""Safe markdown for chat messages: escape everything first, then apply a small markdown subset.

Model and user text are untrusted. ``render_markdown`` HTML-escapes the whole text before any
markdown rule runs, so no tag, attribute or entity written by the model or the user can reach
the DOM; the only markup in the output is the markup produced here:

* fenced code blocks (```` ``` ```` with an optional language word), ``inline code``;
* paragraphs (blank lines), line breaks (single newlines), ``#``-headings, ``>`` quotes;
* bulleted (``-``, ``*``, ``+``) and numbered (``1.``) lists, one level;
* ``**bold**``, ``*italic*`` / ``_italic_``;
* links ``[text](url)`` and bare URLs, for ``http``/``https`` only, opened with
  ``rel="noopener noreferrer nofollow"``; any other scheme stays plain text.

Why not a markdown library: none is in the stack, the subset above is what chat replies use,
and escape-first makes the safety argument one line long (the renderer never sees a raw ``<``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([A-Za-z0-9_+.#-]{0,32})[^\n]*$")
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_BULLET_RE = re.compile(r"^ {0,3}[-*+]\s+(.*)$")
_NUMBER_RE = re.compile(r"^ {0,3}\d{1,9}[.)]\s+(.*)$")
_QUOTE_RE = re.compile(r"^ {0,3}&gt;\s?(.*)$")  # matched on escaped text
_RULE_RE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$")
_CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# Links and URLs are matched on escaped text: quotes are &quot;/&#x27;, so they cannot end the
# href attribute; "&" appears as "&amp;" and stays a valid entity inside the attribute.
_URL = r"https?://(?:(?!&quot;|&#x27;|&lt;|&gt;)[^\s<>\[\]()])+"
_LINK_RE = re.compile(r"\[([^\[\]\n]{1,300})\]\((" + _URL + r")\)")
_BARE_URL_RE = re.compile(r"(?<![\w/=\"'>])(" + _URL + r")")
_BOLD_RE = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC_RE = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])|(?<![_\w])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![_\w])")
_TRAILING_PUNCT = ".,;:!?"
_HEADING_TAG = {1: "h3", 2: "h4", 3: "h5", 4: "h6", 5: "h6", 6: "h6"}
_SAFE_DOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def dom_id(prefix: str, raw: str) -> str:
    """A DOM id (and CSS selector part) for ``raw``: kept when already safe, else a digest."""
    if _SAFE_DOM_ID.fullmatch(raw or ""):
        return f"{prefix}-{raw}"
    return f"{prefix}-h{hashlib.sha1((raw or '').encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def render_markdown(text: str | None) -> SafeString:
    """``text`` as safe HTML (the subset in the module docstring). ``None``/empty: ``""``."""
    if not text:
        return mark_safe("")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return mark_safe("\n".join(_blocks(lines)))


def _blocks(lines: list[str]) -> Iterator[str]:
    index, count = 0, len(lines)
    paragraph: list[str] = []

    def flush() -> Iterator[str]:
        if paragraph:
            yield "<p>" + "<br>\n".join(_inline(escape(line.strip())) for line in paragraph) + "</p>"
            paragraph.clear()

    while index < count:
        line = lines[index]
        fence = _FENCE_RE.match(line)
        if fence:
            yield from flush()
            marker, lang = fence.group(1), fence.group(2)
            body: list[str] = []
            index += 1
            while index < count and not lines[index].strip().startswith(marker[0] * len(marker)):
                body.append(lines[index])
                index += 1
            index += 1  # the closing fence (or the end of the text: an unclosed fence runs to it)
            cls = f' class="language-{escape(lang)}"' if lang else ""
            yield f"<pre><code{cls}>{escape(chr(10).join(body))}</code></pre>"
            continue
        if not line.strip():
            yield from flush()
            index += 1
            continue
        heading = _HEADING_RE.match(line)
        if heading:
            yield from flush()
            tag = _HEADING_TAG[len(heading.group(1))]
            yield f"<{tag}>{_inline(escape(heading.group(2)))}</{tag}>"
            index += 1
            continue
        if _RULE_RE.match(line):
            yield from flush()
            yield "<hr>"
            index += 1
            continue
        for pattern, tag in ((_BULLET_RE, "ul"), (_NUMBER_RE, "ol")):
            if pattern.match(line):
                yield from flush()
                items: list[str] = []
                while index < count and (item := pattern.match(lines[index])):
                    items.append(item.group(1))
                    index += 1
                    # An indented line continues the item above it.
                    while index < count and lines[index].startswith(("  ", "\t")) and lines[index].strip():
                        stripped = lines[index].strip()
                        nested = _BULLET_RE.match(stripped) or _NUMBER_RE.match(stripped)
                        if nested:  # one level only: a nested item becomes an item of its own
                            items.append(nested.group(1))
                        else:
                            items[-1] += " " + stripped
                        index += 1
                yield f"<{tag}>" + "".join(f"<li>{_inline(escape(i.strip()))}</li>" for i in items) + f"</{tag}>"
                break
        else:
            escaped = escape(line)
            if _QUOTE_RE.match(escaped):
                yield from flush()
                quoted: list[str] = []
                while index < count and (q := _QUOTE_RE.match(escape(lines[index]))):
                    quoted.append(q.group(1))
                    index += 1
                yield "<blockquote>" + "<br>\n".join(_inline(q.strip()) for q in quoted) + "</blockquote>"
                continue
            paragraph.append(line)
            index += 1
    yield from flush()


def _inline(escaped: str) -> str:
    """Inline rules over already-escaped text; code spans are cut out first and left verbatim."""
    out: list[str] = []
    last = 0
    for match in _CODE_SPAN_RE.finditer(escaped):
        out.append(_emphasis(escaped[last : match.start()]))
        out.append(f"<code>{match.group(2).strip()}</code>")
        last = match.end()
    out.append(_emphasis(escaped[last:]))
    return "".join(out)


def _anchor(url: str, label: str) -> str:
    return f'<a href="{url}" rel="noopener noreferrer nofollow" target="_blank">{label}</a>'


def _emphasis(escaped: str) -> str:
    links: list[str] = []

    def keep(html: str) -> str:
        links.append(html)
        return f"\x00{len(links) - 1}\x00"

    def bare(match: re.Match[str]) -> str:
        url = match.group(1)
        tail = ""
        while url and url[-1] in _TRAILING_PUNCT:
            url, tail = url[:-1], url[-1] + tail
        return keep(_anchor(url, url)) + tail

    # NUL cannot occur in escaped text we produce placeholders for: strip any the input had.
    text = escaped.replace("\x00", "")
    text = _LINK_RE.sub(lambda m: keep(_anchor(m.group(2), m.group(1))), text)
    text = _BARE_URL_RE.sub(bare, text)
    text = _BOLD_RE.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", text)
    text = _ITALIC_RE.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: links[int(m.group(1))], text)
