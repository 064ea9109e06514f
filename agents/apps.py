from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the boot-time validation of config/scopes/bot.yml (manage.py check & co).
        from agents.declarations import checks  # noqa: F401
        from agents.llm import checks as model_checks  # noqa: F401  (bad model settings stop the boot)
        from agents.runtime.services import inspection_source
        from memory import inspection

        # memory/ cannot import agents/: the memory admin, archive API and export commands
        # find the process's stores through this provider.
        inspection.set_provider(inspection_source)

        # A password change, sign-out or deactivation revokes tokens and closes chat sockets.
        from agents.personal import revocation

        revocation.connect()
        install_capabilities()


def install_capabilities() -> None:
    """Join the capabilities to the runtime through its registries, so the loop imports none of
    them: tool supplements, the hook installers of ``MODEX_RUNTIME_HOOKS``, and the Dream
    Engine's trigger on every set of services."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    from agents.experience import supplement
    from agents.runtime import hooks, services
    from agents.tasks import register_long_term_hooks

    supplement.register()
    services.on_build(register_long_term_hooks)
    for path in getattr(settings, "MODEX_RUNTIME_HOOKS", ()):
        try:
            installer = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(f"MODEX_RUNTIME_HOOKS: cannot import {path!r} ({exc})") from exc
        if not callable(installer):
            raise ImproperlyConfigured(f"MODEX_RUNTIME_HOOKS: {path!r} is not callable")
        hooks.register_installer(path, installer)
