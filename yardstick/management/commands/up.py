from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from yardstick.runner import Runner


def port_number(value):
    try:
        port = int(value)
    except ValueError:
        raise CommandError(f"--port must be an integer from 1 to 65535, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise CommandError(f"--port must be an integer from 1 to 65535, got {port}")
    return port


class Command(BaseCommand):
    help = (
        "Start Yardstick: embedded PostgreSQL and Redis when no DATABASE_URL/REDIS_URL, migrations, "
        "the admin user, then the web server, Celery workers, beat and this machine's collector. "
        "Ctrl-C stops everything."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address the web server binds (default 127.0.0.1)")
        parser.add_argument("--port", default="8000", help="web server port (default 8000)")
        parser.add_argument("--no-collector", action="store_true", help="do not run a collector for this machine")
        parser.add_argument("--ready-timeout", type=int, default=180,
                            help="seconds to wait for every part to answer before saying so (default 180)")

    def handle(self, host, port, no_collector, ready_timeout, **options):
        runner = Runner(settings, host, port_number(port), out=self.stdout._out,
                        collector=not no_collector, ready_timeout_s=ready_timeout)
        code = runner.run()
        if code:
            raise SystemExit(code)
