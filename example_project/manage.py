#!/usr/bin/env python
"""Django's command-line utility for the example project."""

import os
import sys


def main() -> None:
    """Run administrative tasks."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        raise ImportError(
            "Couldn't import Django. Create the virtualenv with `make install` at the "
            "repository's root and run this with .venv/bin/python."
        ) from exc
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
