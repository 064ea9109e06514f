from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the boot-time validation of config/scopes/bot.yml (manage.py check & co).
        from agents.declarations import checks  # noqa: F401
        from agents.runtime.services import inspection_source
        from memory import inspection

        # memory/ cannot import agents/: the memory admin, archive API and export commands
        # find the process's stores through this provider.
        inspection.set_provider(inspection_source)

        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_save

        from agents.personal.tokens import revoke_tokens_on_password_change

        post_save.connect(revoke_tokens_on_password_change, sender=get_user_model(),
                          dispatch_uid="modex-revoke-tokens-on-password-change")
