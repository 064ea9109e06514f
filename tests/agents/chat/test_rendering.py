"""Safe markdown (agents.chat.rendering) and the meter's view models (agents.chat.meter)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.chat.meter import MeterHistory, chart_view, meter_view, section_key
from agents.runtime.events import CleanupDone, ContextReady
from agents.chat.rendering import dom_id, render_markdown
from memory.hooks import SectionAccount

ALLOWED_TAGS = {"p", "br", "pre", "code", "strong", "em", "ul", "ol", "li", "a", "h3", "h4", "h5", "h6", "blockquote", "hr"}


def tags(html: str) -> set[str]:
    return set(re.findall(r"</?([a-zA-Z0-9]+)", html))


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click](javascript:alert(1))",
        "[click](http://a.example/\" onmouseover=\"alert(1))",
        "```\n</code></pre><script>x</script>\n```",
        "`<b>` and **<i>bold</i>**",
        "<a href='http://x'>x</a>",
        "&lt;script&gt; already escaped",
        "\x00<script>",
    ],
)
def test_no_raw_html_from_the_text_reaches_the_output(hostile):
    html = render_markdown(hostile)
    assert tags(html) <= ALLOWED_TAGS
    assert "<script" not in html and "<img" not in html and "<b>" not in html and "<i>" not in html
    assert "javascript:" not in re.sub(r">[^<]*<", "><", html)  # never inside a tag
    for href in re.findall(r'href="([^"]*)"', html):
        assert href.startswith(("http://", "https://")) and '"' not in href


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>\"'&*_`[]()#-> \n/:ahtpsjvcrix=1.")), max_size=80))
def test_any_text_yields_only_our_tags_and_safe_links(text):
    html = render_markdown(text)
    assert tags(html) <= ALLOWED_TAGS
    for attrs in re.findall(r"<a ([^>]*)>", html):
        assert re.fullmatch(r'href="https?://[^"<>]*" rel="noopener noreferrer nofollow" target="_blank"', attrs), attrs


def test_the_markdown_subset():
    html = render_markdown(
        "## Goal\nPlan **the** trip, *soon*.\n\n- one\n- two `code`\n\n1. first\n2. second\n\n"
        "```python\nprint('<hi>')\n```\nSee https://example.com/a?b=1&c=2.\n> quoted"
    )
    assert "<h4>Goal</h4>" in html and "<strong>the</strong>" in html and "<em>soon</em>" in html
    assert "<ul><li>one</li><li>two <code>code</code></li></ul>" in html
    assert "<ol><li>first</li><li>second</li></ol>" in html
    assert '<pre><code class="language-python">print(&#x27;&lt;hi&gt;&#x27;)</code></pre>' in html
    assert '<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow" target="_blank">' in html
    assert html.count("example.com/a?b=1&amp;c=2</a>.") == 1
    assert "<blockquote>quoted</blockquote>" in html
    assert render_markdown(None) == "" and render_markdown("") == ""
    assert render_markdown("snake_case_name stays") == "<p>snake_case_name stays</p>"


def test_dom_ids_are_safe_selectors():
    assert dom_id("msg", "abc123") == "msg-abc123"
    odd = dom_id("tool", 'call"><script>')
    assert re.fullmatch(r"tool-h[0-9a-f]{16}", odd)


def test_meter_view_stacks_sections_by_fixed_key_with_threshold():
    sections = (
        SectionAccount("system", 100, 1),
        SectionAccount("core memory", 50, 3),
        SectionAccount("pruned catalog", 150, 4),
        SectionAccount("tools", 200, 5),
        SectionAccount("messages", 500, 9),
    )
    view = meter_view(sections=sections, total=1100, window=4000, threshold=3000, completion=40, session=900)
    assert [s.key for s in view.segments] == ["system", "core", "pruned", "tools", "messages", "overhead"]
    assert view.segments[-1].tokens == 100 and view.threshold_left == "75.000%"
    assert view.segments[0].width == "2.500%" and view.completion_width == "1.000%"
    assert not view.over_threshold and view.total_percent == 27.5
    assert view.session_width == "22.500%" and view.session_percent == 30.0 and view.threshold_anchor == "end"
    assert section_key("available_experiences") == "experiences" and section_key("mystery") == "other"
    # The counts are said in words; the framing is named for what it is.
    words = {s.key: s.words for s in view.legend}
    assert words["core"] == "3 files filled" and words["pruned"] == "4 entries" and words["tools"] == "5 tools"
    assert words["messages"] == "9 messages" and words["system"] == "" and words["overhead"] == ""
    assert view.segments[-1].label == "Message framing"


def test_the_threshold_is_compared_with_the_conversation_size_not_the_context():
    """A context past the threshold (instructions, memory and tools count there) is not a
    conversation past it: only the session's tokens trigger cleanup, and only they are marked."""
    sections = (SectionAccount("system", 2500, 1), SectionAccount("messages", 1000, 4))
    big_context = meter_view(sections=sections, total=3572, window=16384, threshold=3000, session=1000)
    assert not big_context.over_threshold
    past = meter_view(sections=sections, total=3572, window=16384, threshold=3000, session=3100)
    assert past.over_threshold and past.session_percent == 103.3
    overflow = meter_view(sections=sections, total=5000, window=4000, threshold=3000, session=8000)
    assert overflow.threshold_left == "37.500%" and overflow.session_width == "100.000%"
    assert meter_view(sections=sections, total=10, window=4000, threshold=400).threshold_anchor == "start"


def test_chart_marks_cleanups_between_points():
    history = MeterHistory()
    for total in (500, 900, 1300):
        history = history.with_context(ContextReady(1, (), total, 4096, 1000))
    history = history.with_cleanup(CleanupDone(True, "", 5, 2, 1300, 400, 9, False))
    history = history.with_context(ContextReady(1, (), 600, 4096, 1000, session_tokens=450))
    chart = chart_view(MeterHistory.from_json(history.to_json()))
    assert not chart.empty and len(chart.dots) == 4 and chart.cleanup_count == 1
    xs = [float(d.x) for d in chart.dots]
    assert xs[2] < float(chart.marks[0].x) < xs[3]
    assert chart.threshold_y is not None and "5 messages moved" in chart.marks[0].title
    assert "conversation 450 tokens, context sent 600" in chart.dots[-1].title
    # A history written before the size was recorded draws the context's size in its place.
    legacy = MeterHistory.from_json('{"points": [[1, 1, 1, 700, 4096, 1000]], "sections": [["messages", 600, 3]]}')
    assert legacy.last.session == -1 and "conversation 700 tokens" in chart_view(legacy).dots[0].title
    assert chart_view(MeterHistory()).empty
    assert MeterHistory.from_json("not json") == MeterHistory()
