"""Django system checks that validate the scope declaration at boot.

``manage.py check``, ``runserver`` and ``migrate`` run them, so an invalid
``config/scopes/bot.yml`` (or ``MODEX_SCOPES_FILE``) stops the process with every problem
listed: one ``Error`` per problem, id ``modex.E0NN`` by category (see
``agents.declarations.problems.ProblemCode``), message ``<yaml path> (line N): <what is wrong>``.
A valid declaration becomes the one the process keeps (``get_declaration()``).
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from agents.declarations import DeclarationProblem, adopt_boot_declaration, display_path, read_declaration

TAG = "modex"


def problem_to_error(problem: DeclarationProblem, *, label: str) -> checks.Error:
    """The system-check form of one problem."""
    where = problem.path or "(document)"
    if problem.line is not None:
        where += f" (line {problem.line})"
    return checks.Error(f"{where}: {problem.message}", hint=problem.hint, obj=label, id=problem.code.value)


@checks.register(TAG)
def check_scope_declaration(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Validate ``settings.MODEX_SCOPES_FILE``; one error per problem, all of them."""
    if app_configs is not None and not any(config.name == "agents" for config in app_configs):
        return []
    path = settings.MODEX_SCOPES_FILE
    loaded = read_declaration(path)
    if loaded.declaration is not None:
        adopt_boot_declaration(loaded.declaration)
        return []
    label = display_path(path)
    return [problem_to_error(problem, label=label) for problem in loaded.problems]
