"""Minimal stdlib clients for a running server: a browser-like HTTP session and a WebSocket.

Enough for the scale-out tests to log in through the real login form, create a conversation,
and chat over ``/ws/chat/<id>/`` like the page does (the htmx ws extension sends the form as a
JSON object and receives HTML fragments). The chat load test (benchmarks/load_chat.py) drives
its sockets with the same client.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import os
import re
import socket
import struct
import time
from urllib.parse import urlencode

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TURN_DONE = 'data-state="idle"'  # the composer is enabled again: the turn is over


def wait_for_port(port: int, *, timeout: float = 60.0, process=None) -> None:
    """Until something accepts on 127.0.0.1:port (fails early if ``process`` exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Browser:
    """Cookies, CSRF and no redirect following: what a test needs to drive the HTML pages."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    @property
    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def request(self, method: str, path: str, *, form: dict[str, str] | None = None,
                port: int | None = None) -> tuple[int, dict[str, str], str]:
        connection = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=30)
        headers = {"Host": f"127.0.0.1:{port or self.port}", "Cookie": self.cookie_header}
        body = None
        if form is not None:
            form = {**form, "csrfmiddlewaretoken": self.cookies.get("csrftoken", "")}
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key.strip()] = rest.split(";", 1)[0]
        result = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode())
        connection.close()
        return result

    def login(self, username: str, password: str) -> None:
        self.request("GET", "/accounts/login/")
        status, headers, _ = self.request("POST", "/accounts/login/", form={"username": username, "password": password})
        assert status == 302 and "sessionid" in self.cookies, (status, headers)

    def new_conversation(self, agent: str) -> str:
        status, headers, _ = self.request("POST", "/conversations/new/", form={"agent": agent})
        assert status == 302, status
        match = re.search(r"/conversations/([0-9a-f]{32})/", headers["location"])
        assert match, headers["location"]
        return match.group(1)


class WebSocket:
    """An RFC 6455 client (text frames, ping answered, masked as a client must)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.close_code: int | None = None  # the server's close code, once it closed

    @classmethod
    async def connect(cls, port: int, path: str, *, cookie: str, host: str = "127.0.0.1", origin: str | None = None) -> WebSocket:
        """Open ``ws://host:port/path`` with ``cookie``; the Origin is the server's own unless given."""
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin or f'http://{host}:{port}'}\r\n"
             f"Cookie: {cookie}\r\n\r\n").encode()
        )
        await writer.drain()
        status = await reader.readline()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin1").partition(":")
            headers[name.strip().lower()] = value.strip()
        expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if b" 101 " not in status or headers.get("sec-websocket-accept") != expected:
            writer.close()
            raise ConnectionError(f"handshake refused: {status.decode('latin1').strip()}")
        return cls(reader, writer)

    async def send_text(self, text: str) -> None:
        """One masked text frame (any size)."""
        payload, mask = text.encode(), os.urandom(4)
        size = len(payload)
        if size < 126:
            head = bytes([0x81, 0x80 | size])
        elif size < 65536:
            head = bytes([0x81, 0x80 | 126]) + struct.pack("!H", size)
        else:
            head = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", size)
        self.writer.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        await self.writer.drain()

    async def send_json(self, data: dict) -> None:
        await self.send_text(json.dumps(data))

    async def receive(self) -> str | None:
        """The next text message; None when the server closed the socket."""
        parts: list[bytes] = []
        while True:
            first, second = await self.reader.readexactly(2)
            opcode, size = first & 0x0F, second & 0x7F
            if size == 126:
                size = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(size)
            if opcode == 0x8:
                self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
                return None
            if opcode == 0x9:
                self.writer.write(bytes([0x8A, 0x80 | len(data)]) + b"\0\0\0\0" + data)
                continue
            if opcode in (0x0, 0x1):
                parts.append(data)
                if first & 0x80:
                    return b"".join(parts).decode()

    async def until(self, needle: str, *, timeout: float = 30.0) -> list[str]:
        """Frames up to and including the first that contains ``needle``."""
        frames: list[str] = []

        async def read() -> None:
            while True:
                frame = await self.receive()
                if frame is None:
                    raise ConnectionError(f"closed before {needle!r}; got {frames[-3:]}")
                frames.append(frame)
                if needle in frame:
                    return

        await asyncio.wait_for(read(), timeout)
        return frames

    async def chat(self, text: str, *, timeout: float = 60.0) -> str:
        """Send one message; all frames of its turn, joined."""
        await self.send_json({"message": text, "HEADERS": {"HX-Request": "true"}})
        return "".join(await self.until(TURN_DONE, timeout=timeout))

    async def close(self) -> None:
        try:
            self.writer.write(bytes([0x88, 0x82]) + b"\0\0\0\0" + struct.pack("!H", 1000))
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            pass
        self.writer.close()
