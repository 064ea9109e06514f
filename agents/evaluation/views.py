"""The results page of the recall benchmark (``/evaluation/``, staff only)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from agents.evaluation.results import find_runs
from agents.views import staff_required


@staff_required
@require_GET
def results_page(request: HttpRequest) -> HttpResponse:
    """Every run on disk, side by side: evidence recall, scores and tokens drawn as bars."""
    root = Path(settings.MODEX_EVAL_RESULTS)
    runs, skipped = find_runs(root)
    for run in runs:
        # The charts are built from escaped text only (agents.evaluation.charts).
        run.charts = [(name, title, mark_safe(svg)) for name, title, svg in run.charts]
    return render(request, "evaluation/index.html", {"runs": runs, "skipped": skipped, "root": root})
