"""OpenAIChatModel against a real llama-cpp-python server, when one can run here.

Needs the ``llama_cpp`` package (``pip install 'llama-cpp-python[server]'``) and a GGUF model
file named by ``MODEX_TEST_GGUF`` (any small chat model). Skipped otherwise, saying which is
missing. The server is started with a 512-token window so the overflow path is real too.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agents.llm import ContentDelta, ContextLengthExceeded, Finish, complete
from agents.llm.openai import OpenAIChatModel

GGUF = os.environ.get("MODEX_TEST_GGUF", "")
N_CTX = 512

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"),
    pytest.mark.skipif(not GGUF or not Path(GGUF).is_file(), reason="MODEX_TEST_GGUF does not name a GGUF model file"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", GGUF, "--n_ctx", str(N_CTX),
         "--host", "127.0.0.1", "--port", str(port), "--model_alias", "tiny"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited: {process.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("llama_cpp.server did not come up within 120 s")
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


async def test_a_real_server_streams_a_reply_and_reports_overflow_as_context_length(llama_server):
    model = OpenAIChatModel(base_url=llama_server, api_key=None, model="tiny", timeout=120, max_retries=0)
    try:
        events = [e async for e in model.stream(messages=[{"role": "user", "content": "Say hi."}], max_tokens=8)]
        assert isinstance(events[-1], Finish) and events[-1].reason in ("stop", "length")
        assert any(isinstance(e, ContentDelta) for e in events) or events[-1].reason == "length"
        with pytest.raises(ContextLengthExceeded):
            await complete(model, messages=[{"role": "user", "content": "word " * (N_CTX * 3)}], max_tokens=8)
    finally:
        await model.aclose()
