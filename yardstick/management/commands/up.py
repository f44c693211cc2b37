from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from yardstick.runner import ROLES, WEB_PROCESSES_MAX, RoleError, Runner, check_roles, parse_roles


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
        "the admin user, then the web server, Celery workers, beat and this machine's collector "
        "(--role picks some). "
        "Ctrl-C stops everything."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address the web server binds (default 127.0.0.1)")
        parser.add_argument("--port", default="8000", help="web server port (default 8000)")
        parser.add_argument("--role", default=",".join(ROLES),
                            help=f"the parts to run here, comma-separated, of {','.join(ROLES)} (default: all); "
                                 "a GPU node: --role jobs,collector with DATABASE_URL and REDIS_URL of the control plane")
        parser.add_argument("--web-processes", default="1",
                            help="web servers sharing the address, for more live viewers than one process carries "
                                 f"(1 to {WEB_PROCESSES_MAX}; default 1)")
        parser.add_argument("--no-collector", action="store_true", help="do not run a collector for this machine")
        parser.add_argument("--ready-timeout", type=int, default=180,
                            help="seconds to wait for every part to answer before saying so (default 180)")
        parser.add_argument("--verbose", action="store_true",
                            help="print every line of every part here (Celery's per-task lines, banners, requests), "
                                 "not only starts, stops, warnings, errors and jobs; all of it is in <data dir>/log either way")

    def handle(self, host, port, role, no_collector, ready_timeout, verbose, web_processes, **options):
        if not web_processes.isdigit() or not 1 <= int(web_processes) <= WEB_PROCESSES_MAX:
            raise CommandError(f"--web-processes must be a whole number from 1 to {WEB_PROCESSES_MAX}, "
                               f"got {web_processes!r}")
        try:
            roles = parse_roles(role)
            if no_collector:
                roles = tuple(r for r in roles if r != "collector")
                if not roles:
                    raise RoleError("--no-collector leaves nothing to run of --role collector")
            check_roles(settings, roles)
        except RoleError as err:
            self.stderr.write(str(err))
            raise SystemExit(2) from None
        runner = Runner(settings, host, port_number(port), out=self.stdout._out,
                        roles=roles, ready_timeout_s=ready_timeout, verbose=verbose,
                        web_processes=int(web_processes))
        code = runner.run()
        if code:
            raise SystemExit(code)
