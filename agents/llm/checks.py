"""A Django system check of the model settings, so a bad one stops the process at boot.

``model_from_settings`` reads the environment only when the first page or turn needs the model;
without this check, ``OPENAI_BASE_URL`` set without ``OPENAI_MODEL`` (or any other bad value)
let ``manage.py check``, ``migrate`` and the server start, and then every signed-in page failed.
"""

from __future__ import annotations

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

MODEL_SETTINGS = "modex.E101"


@checks.register("modex")
def check_model_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """One error naming the variable when the model cannot be built from the environment."""
    if app_configs is not None and not any(config.name == "agents" for config in app_configs):
        return []
    from agents.llm.settings import model_from_settings

    try:
        model_from_settings()
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix the variable in the environment (README, Configuration), or unset OPENAI_BASE_URL "
                "to use the built-in offline model.",
                obj="environment",
                id=MODEL_SETTINGS,
            )
        ]
    return []
