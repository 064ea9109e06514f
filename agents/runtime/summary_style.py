"""How a model answers the compact summary's template, remembered per endpoint.

A cleanup first asks the model for the whole summary template (six sections), then asks alone
for each section the answer lacks. The smallest models never write a section of the template:
they chat on until the completion cap, and every section is then asked alone anyway. With
SmolLM2-135M on a CPU that whole answer (1,024 tokens) cost 30-60 s of each cleanup's two
minutes, and was never used (and a call that long cannot finish in the pauses between a user's
messages: each turn cuts it, and it starts again). So once a model's whole answer held no
section and ran on past the summary's budget, or held no section ``MISSES`` times in a row (a
short answer without one, empty or refused, says less about the model), the next cleanups of
that endpoint that summarize in one call ask each section alone at once
(``SummaryOptions.sections_alone``); after ``RECHECK_EVERY`` of those, one asks the template
again, in case the model behind the endpoint changed (an answer with a section goes back to the
template).

Kept in the shared KV store (global scope, ``summary.template.<endpoint id>``), so the chat's
cleanups and the task worker's learn from each other. Advisory: a lost write costs one cleanup
the whole question again. A model without an endpoint of its own (the offline model, a wrapper
that does not say its ``base_url``) always gets the template.
"""

from __future__ import annotations

import json
from typing import Any

from agents.runtime.gate import endpoint_id
from memory.scopes import GlobalScope
from memory.stores.base import KVStore

KEY_PREFIX = "summary.template."
#: Whole answers with no section, in a row, before the sections are asked alone.
MISSES = 2
#: Cleanups that ask the sections alone before one asks the whole template again.
RECHECK_EVERY = 10
_SCOPE = GlobalScope()


def _read(kv: KVStore, key: str) -> dict:
    item = kv.get(_SCOPE, key)
    try:
        value = json.loads(item.value) if item is not None else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def sections_alone(kv: KVStore, model: Any) -> bool:
    """Whether a cleanup summarizing with ``model`` should ask each section alone at once."""
    endpoint = endpoint_id(model)
    if endpoint is None:
        return False
    seen = _read(kv, KEY_PREFIX + endpoint)
    misses, alone = seen.get("misses", 0), seen.get("alone", 0)
    return isinstance(misses, int) and isinstance(alone, int) and misses >= MISSES and alone < RECHECK_EVERY


def learn(kv: KVStore, model: Any, *, followed: bool | None, asked_alone: bool, ran_on: bool = False) -> None:
    """Record a cleanup's summary: the sections asked alone (counted toward the next check), or
    whether the model's answer to the whole template held any section (``ran_on``: none, and it
    chatted on past the budget)."""
    endpoint = endpoint_id(model)
    if endpoint is None or (followed is None and not asked_alone):
        return
    key = KEY_PREFIX + endpoint
    seen = _read(kv, key)
    misses = seen.get("misses", 0) if isinstance(seen.get("misses"), int) else 0
    alone = seen.get("alone", 0) if isinstance(seen.get("alone"), int) else 0
    if asked_alone:
        value = {"misses": misses, "alone": alone + 1}
    elif followed:
        value = {"misses": 0, "alone": 0}
    else:
        value = {"misses": max(misses + 1, MISSES if ran_on else 0), "alone": 0}
    kv.put(_SCOPE, key, json.dumps(value))
