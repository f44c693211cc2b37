#!/usr/bin/env python
"""Django's command-line utility, with the embedded servers started on demand.

With no DATABASE_URL (or REDIS_URL), a command such as `migrate` or
`create_token` starts the embedded server it needs when it is not running, and
stops it again afterwards; `up` manages the servers itself, and while it runs a
command only waits for them. A command that needs the schema first brings it up
to date (or refuses, naming what to run): see services.ensure_schema.
"""
import os
import sys

# Commands that manage the embedded servers themselves, or need none.
SELF_MANAGED = {"up", "help", "version", "--help", "-h", "--version", "check", "makemigrations"}
# Any command asked for its help or version answers that alone: no server started, no migration applied.
ANSWERS_ALONE = {"--help", "-h", "--version"}


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        _ = settings.DATA_DIR  # reading settings checks every variable once
    except ImproperlyConfigured as err:
        sys.exit(f"Configuration error: {err}")
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    if command in SELF_MANAGED or ANSWERS_ALONE.intersection(sys.argv[2:]):
        execute_from_command_line(sys.argv)
        return
    # here: the commands above that manage their own servers need none of this
    from yardstick.embedded import ServiceError
    from yardstick.services import embedded_services_for_command, ensure_schema

    try:
        with embedded_services_for_command():
            ensure_schema(command, say=lambda line: print(line, file=sys.stderr))
            execute_from_command_line(sys.argv)
    except ServiceError as err:  # a server down or not starting: say why, not a traceback
        sys.exit(f"Error: {err}")


if __name__ == "__main__":
    main()
