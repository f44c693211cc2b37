import sys

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from collector.agent import cli


def settings_dsn(settings_dict):
    """A libpq DSN for Django's database settings (HOST may be a unix socket folder)."""
    from psycopg.conninfo import make_conninfo

    parts = {
        "host": settings_dict.get("HOST") or None,
        "port": str(settings_dict["PORT"]) if settings_dict.get("PORT") else None,
        "dbname": settings_dict.get("NAME") or None,
        "user": settings_dict.get("USER") or None,
        "password": settings_dict.get("PASSWORD") or None,
    }
    options = settings_dict.get("OPTIONS") or {}
    for key in ("sslmode", "sslrootcert", "sslcert", "sslkey", "application_name"):
        if options.get(key):
            parts[key] = str(options[key])
    return make_conninfo(**{k: v for k, v in parts.items() if v is not None})


class Command(BaseCommand):
    help = "Run the telemetry agent against this project's database until SIGTERM/SIGINT (same code as python -m collector.agent)."

    def add_arguments(self, parser):
        cli.add_arguments(parser, dsn_required=False, serve_scrape_s=settings.YARDSTICK_SERVE_SCRAPE_S)

    def handle(self, *args, **opts):
        cli.configure_logging(self.stdout._out if hasattr(self.stdout, "_out") else sys.stdout)
        # Inside Yardstick the spools live with the rest of its data, each agent's in a folder of its own.
        status = cli.run(opts, settings_dsn(connection.settings_dict), spool_root=str(settings.DATA_DIR / "collector-spool"))
        if status:
            sys.exit(status)
