"""Fixtures for the model layer: models pointed at the fake OpenAI-compatible server (``fake_openai``, tests/conftest.py)."""

from __future__ import annotations

import random

import pytest

from agents.llm.openai import OpenAIChatModel
from tests.fakes.openai_server import FAKE_API_KEY


@pytest.fixture
def sleeps() -> list[float]:
    """The backoff delays the model asked for (the injected sleep records instead of waiting)."""
    return []


@pytest.fixture
async def make_model(fake_openai, sleeps):
    """Build OpenAIChatModels against the fake server with instant, recorded backoff."""
    models: list[OpenAIChatModel] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    def make(**options) -> OpenAIChatModel:
        options.setdefault("timeout", 5.0)
        options.setdefault("max_retries", 3)
        options.setdefault("base_url", fake_openai.url)
        model = OpenAIChatModel(api_key=FAKE_API_KEY, model="fake-model", sleep=sleep, rng=random.Random(7), **options)
        models.append(model)
        return model

    yield make
    for model in models:
        await model.aclose()
