"""Which dataset a run asks (``--dataset``): ``generated`` (the default, CI's), ``locomo:PATH`` or
``longmemeval:PATH``."""

from __future__ import annotations

import re
from pathlib import Path

from agents.evaluation.data import Dataset, DatasetError
from agents.evaluation.generated import DEFAULT_SEED, generate
from agents.evaluation.loaders import load_locomo, load_longmemeval

KINDS = ("generated", "locomo", "longmemeval")


def load_dataset(spec: str, *, size: str = "small", seed: int = DEFAULT_SEED) -> Dataset:
    """The dataset ``spec`` names; raises DatasetError (a file) or ValueError (the spec)."""
    kind, _, path = spec.partition(":")
    if kind == "generated" and not path:
        return generate(size=size, seed=seed)
    if kind in ("locomo", "longmemeval"):
        if not path:
            raise ValueError(f"--dataset {kind}:PATH needs the path of the {kind} JSON file")
        file = Path(path).expanduser()
        if not file.is_file():
            raise DatasetError(f"{file}: no such file")
        return load_locomo(file) if kind == "locomo" else load_longmemeval(file)
    raise ValueError(f"unknown dataset {spec!r}; use generated, locomo:PATH or longmemeval:PATH")


def dataset_slug(dataset: Dataset, *, size: str) -> str:
    """A short name for file names: ``generated-small``, ``locomo-locomo10``."""
    if dataset.kind == "generated":
        return f"generated-{size}"
    stem = Path(dataset.source).stem
    return f"{dataset.kind}-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:40] or "data")
