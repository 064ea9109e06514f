"""``manage.py login_unlock <username>``: lift the sign-in lock of an account (agents/personal/login.py)."""

from django.core.management.base import BaseCommand

from agents.personal.login import unlock


class Command(BaseCommand):
    help = "Lift the sign-in lock (and the count of failed sign-ins) of an account name."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")

    def handle(self, *args, username: str, **options) -> None:
        removed = unlock(username=username)
        self.stdout.write(f"{username}: {'unlocked' if removed else 'was not locked'}.")
