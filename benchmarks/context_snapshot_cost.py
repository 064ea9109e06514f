"""Diagnostic: the cost of keeping a step's request for the context viewer (agents.chat.context_view:
cut into sections, JSON, one KV put) beside recording the meter point, per step, file backend,
at a 16k and a 128k window filled to 90% of the threshold. Both run off the event loop.

    .venv/bin/python -m benchmarks.context_snapshot_cost
"""
import os
import shutil
import statistics
import tempfile
import time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")
import django

django.setup()
from pathlib import Path
from memory.stores.registry import open_bundle
from memory.scopes import SessionScope
from memory.messages import Message
from memory.assembly.assembler import ContextAssembler, default_pipeline
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from agents.runtime.events import ContextReady
from agents.chat.meter import record_context
from agents.chat.context_view import snapshot_of, record_snapshot
tmp = Path(tempfile.mkdtemp())
bundle = open_bundle("file", root=tmp / "ws")
catalog = PrunedCatalog(tmp / "pruned")
assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))
for window in (16384, 131072):
    session = SessionScope(f"bench{window}")
    config = MemoryConfig(context_window=window)
    text = "We talked about the tides, the moon and the harbour schedule for the spring regatta. " * 20
    n = 0
    while bundle.messages.head(session).tokens < config.threshold * 0.9:
        bundle.messages.append(session, [Message(role="user" if n % 2 == 0 else "assistant", content=f"{n} {text}")])
        n += 1
    context = assembler.assemble(session=session, config=config, agent="default", user="1", instructions="Be helpful.")
    event = ContextReady(step=1, context=context, **context.figures())
    meter, kept = [], []
    for _ in range(30):
        t = time.perf_counter(); history = record_context(kv=bundle.kv, session=session, event=event); meter.append(time.perf_counter() - t)
        t = time.perf_counter(); record_snapshot(kv=bundle.kv, session=session, snapshot=snapshot_of(event, point=history.last)); kept.append(time.perf_counter() - t)
    size = len(bundle.kv.get_value(session, "context.json"))
    print(f"window {window}: {context.total_tokens} tokens sent, {len(context.messages)} messages; meter point {statistics.median(meter)*1000:.2f} ms, "
          f"kept request {statistics.median(kept)*1000:.2f} ms ({size/1024:.0f} KiB), ratio {statistics.median(kept)/statistics.median(meter):.1f}x")
shutil.rmtree(tmp, ignore_errors=True)
