"""The floor under the streaming workload's first frame: a WebSocket relay that does nothing else.

    daphne benchmarks.workloads.bare_relay:application      (BARE_RELAY_MODEL_URL set)

A plain ASGI application, served by daphne exactly as Modex is: it accepts any WebSocket, and
for each text frame it receives it streams one chat completion from ``BARE_RELAY_MODEL_URL``
through Modex's own model adapter (``OpenAIChatModel.stream``, the same request Modex makes)
and sends each content delta to the socket as soon as it arrives, in the fragment Modex sends,
then the idle composer. No login, no session lookup, no storage, no context assembly, no
rendering.

Its time to the first content frame is what relaying a model over a WebSocket costs on this
machine before Modex does anything of its own: the client's frame into daphne, the request and
its first event, the frame back out. The streaming workload measures it beside Modex and the
raw SDK in the same run, so that Modex's own part of its first frame is the difference.
"""

from __future__ import annotations

import asyncio
import html
import os

FRAME = '<div hx-swap-oob="beforeend:#live-bare-content">{}</div>'
IDLE = '<div id="composer" data-state="idle"></div>'


_model = None


def model():
    """One adapter for the process, as Modex keeps one: its client and connection pool are
    made once, not on each turn's clock."""
    global _model
    if _model is None:
        from agents.llm.openai import OpenAIChatModel

        _model = OpenAIChatModel(base_url=os.environ["BARE_RELAY_MODEL_URL"], api_key="sk-bench-not-a-key",
                                 model="fake-model")
    return _model


async def application(scope, receive, send):
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    from agents.llm import ContentDelta

    while True:
        event = await receive()
        if event["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
        elif event["type"] == "websocket.disconnect":
            return
        elif event["type"] == "websocket.receive":
            messages = [{"role": "user", "content": event.get("text") or ""}]
            async for delta in model().stream(messages=messages, tools=None):
                if isinstance(delta, ContentDelta) and delta.text:
                    await send({"type": "websocket.send", "text": FRAME.format(html.escape(delta.text))})
                    await asyncio.sleep(0)  # let the frame go out (as Modex's consumer does)
            await send({"type": "websocket.send", "text": IDLE})
