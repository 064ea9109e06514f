"""The Origin attack in a real browser: a page on another port of the same host, visited by a
signed-in user, tries to read their conversation over the chat socket (issue 20).

Cookies are per host, not per port, so Chromium sends the user's session cookie with the
hostile page's socket; only the origin check (scheme, host and port) stands in the way. The
control: the chat page itself, on the site's own origin, connects and syncs.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.agents.chat import test_browser as chat_browser
from tests.browser import BROWSER_MARKS

pytestmark = BROWSER_MARKS

HOSTILE_PAGE = """<!doctype html><title>cat pictures</title><script>
window.__frames = []; window.__state = "connecting";
const ws = new WebSocket(%(url)r);
ws.onopen = () => { window.__state = "open"; ws.send(JSON.stringify({action: "sync"})); };
ws.onmessage = (e) => window.__frames.push(e.data);
ws.onclose = (e) => { window.__state = "closed:" + e.code; };
</script>"""


def hostile_server(socket_url: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = (HOSTILE_PAGE % {"url": socket_url}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class OriginInTheBrowser(chat_browser.ChatInTheBrowser):
    """The chat browser tests' live server and Chromium, with this test only."""

    def test_a_page_on_another_port_cannot_read_the_conversation(self):
        chat_url = self.login_and_start()  # the control: the site's own page connects
        page = self.page
        page.fill("#composer-text", "my secret is pelican")
        page.press("#composer-text", "Enter")
        page.wait_for_selector("#composer[data-state=idle]")
        page.wait_for_function("() => document.body.innerText.includes('pelican')")
        conversation_id = chat_url.rstrip("/").rsplit("/", 1)[-1]
        site = urlsplit(self.live_server_url)
        socket_url = f"ws://{site.netloc}/ws/chat/{conversation_id}/"

        # The site's own origin may open the socket and sync (the same script as the attack's).
        script = HOSTILE_PAGE.split("<script>")[1].split("</script>")[0] % {"url": socket_url}
        page.evaluate("() => {" + script + "}")
        # The sync's answer is the re-rendered list (a status frame may come first: the turn's
        # lease is released just after the page saw the turn end).
        page.wait_for_function("() => window.__frames.some(f => f.includes('id=\"messages\"'))", timeout=10000)
        assert any("pelican" in frame for frame in page.evaluate("window.__frames"))

        server = hostile_server(socket_url)
        try:
            hostile = f"http://{site.hostname}:{server.server_address[1]}/"
            page.goto(hostile)
            page.wait_for_function("() => window.__state !== 'connecting'", timeout=10000)
            page.wait_for_timeout(500)  # frames a sync would send, had the socket opened
            assert page.evaluate("window.__state").startswith("closed:"), "the hostile page's socket opened"
            assert page.evaluate("window.__frames") == []
        finally:
            server.shutdown()
            server.server_close()


# Only the test above runs here: the chat page's own tests stay in tests/agents/chat/.
for _name in dir(chat_browser.ChatInTheBrowser):
    if _name.startswith("test") and _name not in OriginInTheBrowser.__dict__:
        setattr(OriginInTheBrowser, _name, None)
