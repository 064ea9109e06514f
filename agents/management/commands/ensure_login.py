"""Make sure a local login exists, so `make run` ends on a page someone can open."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a local superuser with a random password (printed once) if no superuser exists."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options):
        User = get_user_model()
        existing = User.objects.filter(is_superuser=True).order_by("pk").first()
        if existing is not None:
            self.stdout.write(
                f"Login: an account exists ({existing.get_username()}). "
                f"Forgot the password? make manage ARGS=\"changepassword {existing.get_username()}\""
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        bar = "=" * 60
        self.stdout.write(
            f"{bar}\nCreated a local login (shown only this once):\n"
            f"  username: {username}\n  password: {password}\n"
            f"Change it with: make manage ARGS=\"changepassword {username}\"\n{bar}"
        )
