#!/usr/bin/env python
"""Django's command-line utility for Modex."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:  # a setting the environment lacks: say which, not a traceback
        command = " ".join(sys.argv[1:])
        sys.exit(f"manage.py: {exc}\nOn the local defaults of `make run`: make manage ARGS=\"{command}\"")


if __name__ == "__main__":
    main()
