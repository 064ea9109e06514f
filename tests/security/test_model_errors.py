"""What an OpenAI-compatible server echoes back never carries the key or the base URL's
credentials into a log, an exception or the user's page (real HTTP to the fake server)."""

from __future__ import annotations

import base64
import logging

import pytest

from agents.llm import ModelError
from agents.llm.scrub import scrub_secrets
from tests.fakes.openai_server import FAKE_API_KEY, HTTPError, RawStream, error_body

USER = [{"role": "user", "content": "hi"}]
PASSWORD = "pw-Secr3t-4242"


async def drain(model):
    async for _ in model.stream(messages=USER):
        pass


@pytest.mark.parametrize("echo", [
    lambda req: f"Incorrect API key provided: {FAKE_API_KEY[:-3]}XYZ",  # a near miss
    lambda req: f"Incorrect API key provided: {FAKE_API_KEY[:12]}...{FAKE_API_KEY[-4:]}",  # cut short
    lambda req: f"bad credentials in {req.headers.get('authorization')}",  # the header as it came
    lambda req: "bad credentials: Basic " + base64.b64encode(f"modex:{PASSWORD}".encode()).decode(),
    lambda req: f"user modex with password {PASSWORD} unknown",
    lambda req: f"rejected api_key={FAKE_API_KEY[:14]}",  # cut short and glued to its name by "="
    lambda req: f"rejected Authorization:{FAKE_API_KEY[:16]}",  # glued by ":"
    lambda req: f"INVALID KEY {FAKE_API_KEY.upper()}",  # echoed upper-cased
    lambda req: f"INVALID KEY={FAKE_API_KEY[:-2].upper()}",  # upper-cased, cut short and glued
])
async def test_an_echoed_secret_is_redacted_everywhere(fake_openai, sleeps, caplog, echo):
    from agents.llm.openai import OpenAIChatModel

    caplog.set_level(logging.DEBUG)
    base_url = fake_openai.url.replace("http://", f"http://modex:{PASSWORD}@")
    model = OpenAIChatModel(base_url=base_url, api_key=FAKE_API_KEY, model="fake-model", max_retries=1,
                            timeout=5, sleep=lambda s: sleeps.append(s) or _done())
    fake_openai.script(lambda req: HTTPError(401, error_body(echo(req))))
    with pytest.raises(ModelError) as caught:
        await drain(model)
    fake_openai.script(*[lambda req: RawStream([{"error": {"message": echo(req), "type": "server_error"}}])] * 3)
    with pytest.raises(ModelError) as streamed:
        await drain(model)
    await model.aclose()
    shown = " ".join([caplog.text, str(caught.value), str(streamed.value), repr(model), model.describe()])
    assert "[redacted]" in str(caught.value) and "[redacted]" in str(streamed.value)
    sent = fake_openai.chat_requests[0].headers.get("authorization", "")
    assert sent == "Basic " + base64.b64encode(f"modex:{PASSWORD}".encode()).decode()  # the URL's credentials
    for secret in (FAKE_API_KEY, FAKE_API_KEY[:12], FAKE_API_KEY[-8:], PASSWORD,
                   base64.b64encode(f"modex:{PASSWORD}".encode()).decode(), sent.partition(" ")[2]):
        assert secret.lower() not in shown.lower(), secret


def test_a_glued_key_keeps_its_name_and_loses_its_value():
    assert scrub_secrets(f"api_key={FAKE_API_KEY[:14]} at 12:30:45", key=FAKE_API_KEY) == "api_key=[redacted] at 12:30:45"


async def _done():
    return None


def test_scrubbing_keeps_ordinary_text():
    text = "The model modex-large at http://127.0.0.1:9/v1 failed with HTTP 500: try again later."
    assert scrub_secrets(text, key=FAKE_API_KEY, base_url="http://127.0.0.1:9/v1") == text
    assert scrub_secrets(text, key=FAKE_API_KEY, base_url=f"http://modex:{PASSWORD}@127.0.0.1:9/v1") == text
