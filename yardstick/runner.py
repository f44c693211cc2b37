"""`manage.py up`: bring every part of Yardstick up in order and keep it up.

Start the embedded servers (when the settings use them), migrate, create the
admin user on first run, then start and supervise the children: the web server,
two Celery workers (upkeep and training queues), beat, and this machine's
collector; `--role` picks some of them (a GPU node: jobs,collector, joined to a
control plane by DATABASE_URL and REDIS_URL, and then neither migrates nor
waits for a web server). Each child's whole output goes to its rotated file in
`<data dir>/log` (yardstick/logs.py); the terminal shows, prefixed with the child's name, what
a person needs of it (warnings, errors, Yardstick's own events; every line with `--verbose`),
and start-up ends with the URL and the login. A child that dies is reported (with its last lines
when it exited by itself) and restarted with back-off, and so is an embedded server this runner
started (on the same data; the children reconnect to it by themselves, so they
keep running); Ctrl-C, SIGTERM or SIGHUP stops them all and the embedded servers,
leaving no process behind, whether or not the terminal still reads what it writes; a watchdog process
(yardstick/watchdog.py) does it should this runner be killed. A lock on the data dir turns a
second `up` away instead of letting two fight over one PostgreSQL.
"""

import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from yardstick import embedded, logs

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a child that ran this long gets its back-off reset
STOP_GRACE_S = 30.0  # a training step must end and write its checkpoint
ROLES = ("web", "worker", "beat", "collector", "jobs")
WS_MAX_MESSAGE_BYTES = 32 * 2**20
LAST_LINES = 10  # of its output that the terminal did not show, printed when a child exits by itself


class RoleError(ValueError):
    """`--role` or the settings it needs were wrong; the message says what and what is accepted."""


def parse_roles(text):
    """The roles named in `text` ("jobs,collector"), as given; raise RoleError naming an unknown one."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in ROLES]
    if unknown or not any(names):
        raise RoleError(f"--role must be a comma-separated list of {', '.join(ROLES)}, got {text!r}"
                        + (f" (unknown: {', '.join(repr(n) for n in unknown)})" if unknown else ""))
    return tuple(dict.fromkeys(names))


def check_roles(settings, roles):
    """Raise RoleError when `roles` cannot run with these settings.

    Without the web role this machine is not the control plane: its parts must
    reach the control plane's database and broker, so embedded servers here
    (which nobody else reaches) are refused, on the control plane's own machine too,
    where the URLs name its servers (the TCP address or the unix sockets).
    """
    if "web" in roles:
        return
    missing = [name for name, embedded_ in (("DATABASE_URL", settings.EMBEDDED_DB),
                                            ("REDIS_URL", settings.EMBEDDED_REDIS)) if embedded_]
    if missing:
        raise RoleError(
            f"--role {','.join(roles)} runs no web server, so it joins a control plane: set "
            f"{' and '.join(missing)} to the control plane's (its `up` prints its DATABASE_URL)"
        )
    if {"jobs", "worker"} & set(roles) and not settings.YARDSTICK_URL:
        # Its workers start runs that report to the control plane, whose address only the control plane's `up` knows.
        raise RoleError(
            f"--role {','.join(roles)} runs no web server, so the runs it starts report to the control plane's: "
            "set YARDSTICK_URL to the control plane's address as this machine reaches it (http://host:port)"
        )


WEB_PROCESSES_MAX = 64


def web_argv(host, port, listen_fd=None):
    """Daphne as `up` runs it: on host:port, or, given `listen_fd`, on a listening socket it inherits (several
    web processes accept on one socket, and the kernel hands each connection to one of them)."""
    bind = ["-b", host, "-p", str(port)] if listen_fd is None else ["--fd", str(listen_fd)]
    # The WebSocket message limit: a layout of a fleet of 100,000 devices is some megabytes.
    return [sys.executable, "-m", "daphne", *bind, "--websocket-max-message-size", str(WS_MAX_MESSAGE_BYTES),
            "yardstick.asgi:application"]


def listening_socket(host, port):
    """A TCP socket bound to host:port and listening, for web processes to inherit."""
    sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                backlog=1024)
    sock.set_inheritable(True)
    return sock


def children_for(settings, roles, host, port, web_processes=1, listen_fd=None):
    """The children `up` starts for `roles`, in start order (none is started here). Given the listening socket
    `listen_fd`, the web server accepts on it (with `web_processes` > 1, that many web children, web1, web2, ...,
    share it); without it, it binds host:port itself."""
    # here: trainer.workers needs Django's apps loaded, and manage.py imports this module before that
    from trainer.workers import LAUNCH_PREFIX, jobs_queue, worker_name

    py = sys.executable
    manage = str(settings.BASE_DIR / "manage.py")
    own = worker_name(settings.YARDSTICK_NODE)
    worker_name_of_launch = f"{LAUNCH_PREFIX}{settings.YARDSTICK_NODE}"
    jobs_queues = [own] if settings.YARDSTICK_POOL else [jobs_queue(), own]
    children = {
        "web": Child("web", web_argv(host, port, listen_fd), pass_fds=() if listen_fd is None else (listen_fd,)),
        "worker": Child("worker", [py, "-m", "celery", "-A", "yardstick", "worker", "-Q", "default",
                                   "-n", "default@%h", "--concurrency", "1", "--loglevel", "INFO"]),
        # Training: one task per slot, fetched one at a time, acknowledged when done. Named after the node;
        # its own queue carries that name (jobs placed on it), the shared one any job (trainer/workers.py).
        "jobs": Child("jobs", [py, "-m", "celery", "-A", "yardstick", "worker", "-Q", ",".join(jobs_queues),
                               "-n", own, "--concurrency", "1", "--prefetch-multiplier", "1",
                               "--loglevel", "INFO"]),
        # Recipes' commands (launch/): a thread each, as many at once as the node's free devices allow, under
        # the node's name.
        "launch": Child("launch", [py, "-m", "celery", "-A", "yardstick", "worker", "-Q", worker_name_of_launch,
                                   "-n", worker_name_of_launch, "--pool", "threads",
                                   "--concurrency", str(settings.LAUNCH_SLOTS), "--prefetch-multiplier", "1",
                                   "--loglevel", "INFO"]),
        "beat": Child("beat", [py, "-m", "celery", "-A", "yardstick", "beat", "--loglevel", "INFO",
                               "-s", str(settings.DATA_DIR / "celerybeat-schedule")]),
        # Under the node name the stints of this machine's jobs carry.
        "collector": Child("collector", [py, manage, "collect", "--source", settings.COLLECTOR_SOURCE,
                                         "--node", settings.YARDSTICK_NODE]),
    }
    # The jobs role is a GPU node's: its jobs worker (embedded jobs) and its launch worker (recipes).
    wanted = [*roles, "launch"] if "jobs" in roles else roles
    out = [children[name] for name in ("web", "worker", "jobs", "launch", "beat", "collector") if name in wanted]
    if "web" in wanted and web_processes > 1:
        webs = [Child(f"web{i}", web_argv(host, port, listen_fd), pass_fds=(listen_fd,))
                for i in range(1, web_processes + 1)]
        out = webs + out[1:]
    # Every part may hand a run the control plane's address (the launch worker on a node, the default worker's
    # follower to Ray and Slurm, a campaign's loop): one value for all of them.
    url = control_plane_url(settings, roles, host, port)
    for child in out:
        if url:
            child.env["YARDSTICK_URL"] = url
    return out


def control_plane_url(settings, roles, host, port):
    """The control plane's address that runs report to: YARDSTICK_URL when set, else, where this `up` runs the web
    server, the address it answers on from this machine (a wildcard host: the loopback); None when neither
    (check_roles refuses the roles that would need it)."""
    if settings.YARDSTICK_URL:
        return settings.YARDSTICK_URL
    if "web" not in roles:
        return None
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class AlreadyRunning(RuntimeError):
    pass


class DataDirLock:
    """An exclusive lock on `<data dir>/up.lock`, held for the life of the runner."""

    def __init__(self, data_dir):
        self.path = data_dir / "up.lock"
        self.fd = None

    def acquire(self, url):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            where = self._describe(fd)
            os.close(fd)
            raise AlreadyRunning(
                f"Yardstick is already running on this data dir{where}; "
                "stop it (Ctrl-C in its terminal) or set YARDSTICK_DATA_DIR to another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "url": url}).encode())
        self.fd = fd

    def held_by(self):
        """When a running `up` holds the lock (and so owns the embedded servers), describe it; else None."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"`manage.py up`{self._describe(fd)}"
        finally:
            os.close(fd)  # drops the shared lock too when it was taken
        return None

    @staticmethod
    def _describe(fd):
        """' (pid N, URL)' from what the holder wrote into the lock file, or ''."""
        try:
            info = json.loads(os.pread(fd, 4096, 0).decode(errors="replace"))
            return f" (pid {info['pid']}, {info['url']})"
        except (ValueError, KeyError, TypeError):
            return ""

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


@dataclass
class Child:
    name: str
    argv: list
    process: subprocess.Popen = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = BACKOFF_MIN_S
    restart_at: float = None
    readers: list = field(default_factory=list)  # a thread per output stream, copying it to `log`
    log: logs.PartLog = None
    hidden: deque = field(default_factory=lambda: deque(maxlen=LAST_LINES))  # kept off the terminal since its last line there
    env: dict = field(default_factory=dict)
    # An embedded server (EmbeddedPostgres or EmbeddedRedis) that this entry watches
    # instead of a process of its own: PostgreSQL daemonizes, so its liveness is
    # its postmaster, not a Popen.
    server: object = None
    pass_fds: tuple = ()  # descriptors it inherits (the web processes' shared listening socket)


class Runner:
    def __init__(self, settings, host, port, out=sys.stdout, roles=ROLES, ready_timeout_s=180, verbose=False,
                 web_processes=1):
        """`verbose`: the terminal shows every line of every part, not only what a person needs.
        `web_processes`: how many web servers share the address (one live fleet publisher among them)."""
        self.settings = settings
        self.roles = roles
        self.host = host
        self.port = port
        self.out = out
        self.url = f"http://{host}:{port}/"
        self.ready_timeout_s = ready_timeout_s
        self.lock = DataDirLock(settings.DATA_DIR)
        self.stopping = threading.Event()
        self.print_lock = threading.Lock()
        self.pg = embedded.EmbeddedPostgres(
            settings.DATA_DIR, settings.PG_LISTEN, settings.PG_PASSWORD, settings.PG_PORT,
        ) if settings.EMBEDDED_DB else None
        self.redis = embedded.EmbeddedRedis(settings.DATA_DIR) if settings.EMBEDDED_REDIS else None
        self.servers = []  # the embedded servers this runner started, supervised like the children
        self.web_processes = web_processes
        self.listener = None  # the web server's listening socket, bound by run() before anything starts
        self.children = children_for(settings, roles, host, port)
        self.verbose = verbose
        self.log_dir = settings.DATA_DIR / "log"
        self.own_packages = own_packages(settings)
        self.up_log = None  # the runner's own lines, once it holds the data dir (one writer to each file)
        self.terminal_lost = False  # set when a write to `out` failed: the runner goes on without it
        self.watchdog = None  # stops every part if this process ends without doing so (yardstick/watchdog.py)

    def on_signal(self, signum=None, frame=None):
        """Ctrl-C, SIGTERM, SIGHUP: stop. The event is set from a thread of its own: a handler runs in the main thread
        between two of its steps, perhaps while that thread holds the event's lock (Event.wait's last steps), and
        setting the event there waited for that lock for ever (`up` hung on Ctrl-C, everything left running)."""
        threading.Thread(target=self.stopping.set, name="up-stop", daemon=True).start()

    # -- output ------------------------------------------------------------

    def say(self, name, line, to_file=None):
        """Print the runner's `line` (about part `name`) and keep it in up.log, as `to_file` when given."""
        if self.up_log is not None:
            self.up_log.write(f"{name:>9} | {to_file or line}")
        self._print(name, line)

    def _print(self, name, line):
        with self.print_lock:
            if self.terminal_lost:
                return
            try:
                self.out.write(f"{name:>9} | {line}\n")
                self.out.flush()
            except (OSError, ValueError) as err:  # ValueError: a closed stream
                self._lose_terminal(err)

    def _lose_terminal(self, err):
        """The terminal is gone (`make run | tee` with tee ended by Ctrl-C: EPIPE): go on without it. Nothing may
        stop the shutdown, so stdout and stderr now lead nowhere (a later write, a final flush, a traceback) and
        the runner's lines go on into up.log."""
        self.terminal_lost = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        if self.up_log is not None:
            self.up_log.write(f"{'up':>9} | the terminal is gone ({err}); going on, writing here only")

    def _read(self, child, stream, shows):
        """Copy `stream` (one of `child`'s outputs) into its log file until it closes; print the lines
        `shows` picks, and keep the others since the last one printed, for when it exits."""
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            child.log.write(line)
            if self.verbose or shows(line):
                self._print(child.name, line)
                child.hidden.clear()  # what came before it the terminal has no need of: it saw what followed
            else:
                child.hidden.append(line)
        stream.close()

    def _start_readers(self, child, streams):
        """`streams`: (stream, shows) pairs; `shows` decides which of its lines the terminal gets."""
        if child.log is None:
            child.log = logs.PartLog(self.log_dir / f"{child.name}.log")
        child.hidden.clear()
        child.readers = [threading.Thread(target=self._read, args=(child, stream, shows), daemon=True)
                         for stream, shows in streams]
        for reader in child.readers:
            reader.start()

    def _for_people(self):
        """A fresh filter for one output stream of a Yardstick process: each stream follows its own records."""
        return logs.RecordsForPeople(self.settings.LOG_LEVEL, self.own_packages)

    def _drain(self, child, timeout_s=1.0):
        """Wait a little for `child`'s readers to copy what it wrote before it ended (a pool process
        of a dead worker may hold its pipes open: not for long)."""
        deadline = time.monotonic() + timeout_s
        for reader in child.readers:
            reader.join(max(0.0, deadline - time.monotonic()))

    def _show_last_lines(self, child):
        """After `child` exited by itself (not killed by a signal), print the lines it wrote after the last one the
        terminal got: why it ended is among them when no record said so."""
        if child.process is None or child.process.returncode is None or child.process.returncode < 0:
            return
        if child.hidden:
            self.say("up", f"the last lines of {child.name} (all of them in {child.log.path}):")
            for line in list(child.hidden):
                self._print(child.name, line)
            child.hidden.clear()

    # -- the sequence ---------------------------------------------------------

    def run(self):
        """Bring everything up, supervise until asked to stop, then stop everything. Return an exit code."""
        try:
            self.lock.acquire(self.url)
        except AlreadyRunning as err:
            self.say("up", str(err))
            return 1
        self.up_log = logs.PartLog(self.log_dir / "up.log")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        if "web" in self.roles:
            # Bound here, before anything starts, and inherited by the web processes: a port another server holds
            # (an `up` left running) is said at once, and /healthz can only be this `up`'s own.
            try:
                self.listener = listening_socket(self.host, self.port)
            except OSError as err:
                self.say("up", f"cannot listen on {self.host}:{self.port}: {os.strerror(err.errno) if err.errno else err}; another server "
                               "holds it (an `up` still running?): stop it, or choose another --port")
                self.lock.release()
                return 1
            self.children = children_for(self.settings, self.roles, self.host, self.port, self.web_processes,
                                         self.listener.fileno())
        self.start_watchdog()
        try:
            self.start_services()
            if self.stopping.is_set():
                return 0
            # The control plane migrates and owns the admin user; a node that joins it
            # (no web role) must not migrate a database it shares, perhaps from older code.
            password = self.prepare_database() if "web" in self.roles else None
            for child in self.children:
                self.start_child(child)
            if "web" in self.roles:
                self.wait_until_ready(password)
            else:
                self.say("up", self._where_logs_are())
                self.say("up", f"running {', '.join(c.name for c in self.children)} as node "
                               f"{self.settings.YARDSTICK_NODE}; press Ctrl-C to stop")
            self.supervise()
            return 0
        finally:
            self.stop_all()
            if self.listener is not None:
                self.listener.close()
            self.dismiss_watchdog()
            self.lock.release()

    # -- the watchdog ---------------------------------------------------------

    def start_watchdog(self):
        """Start the process that stops every part should this one end without doing so (yardstick/watchdog.py):
        in a session of its own (Ctrl-C is for this runner), holding the data dir's lock until it is done."""
        log = open(self.log_dir / "watchdog.log", "ab")
        self.watchdog = subprocess.Popen(
            [sys.executable, "-I", str(Path(__file__).with_name("watchdog.py"))], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=log, pass_fds=(self.lock.fd,), start_new_session=True,
        )
        log.close()

    def tell_watchdog(self):
        """Tell the watchdog what runs now: every child's process group and the embedded servers."""
        parts = {"groups": [c.process.pid for c in self.children if c.process is not None],
                 "redis": self.redis.process.pid if self.redis is not None and self.redis.process else None,
                 "postgres": str(self.pg.pgdata) if self.pg is not None else None}
        self._to_watchdog(json.dumps(parts))

    def dismiss_watchdog(self):
        """Everything is stopped: the watchdog ends without touching anything (and lets go of the lock)."""
        self._to_watchdog("done")
        if self.watchdog is not None:
            self.watchdog.stdin.close()
            try:
                self.watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait()

    def _to_watchdog(self, line):
        if self.watchdog is None:
            return
        try:
            self.watchdog.stdin.write(line.encode() + b"\n")
            self.watchdog.stdin.flush()
        except OSError as err:
            # It died (killed by someone): then nothing stops the parts should this runner be killed too.
            self.say("up", f"the watchdog is gone ({err}); starting another")
            self.start_watchdog()
            if line != "done":
                self.watchdog.stdin.write(line.encode() + b"\n")
                self.watchdog.stdin.flush()

    def start_services(self):
        if self.pg is not None:
            self.say("postgres", f"starting embedded PostgreSQL in {self.pg.pgdata}")
            if self.pg.listen and self.pg.is_running():
                # One a command or a killed `up` left listens on the socket only: TCP needs a restart.
                self.pg.stop()
            self.pg.start()
            self.pg.ensure_database()
            self.servers.append(Child("postgres", [], started_at=time.monotonic(), server=self.pg))
            if self.pg.listen:
                host = self._reachable_host(self.pg.listen)
                self.say("postgres", f"listening on {','.join(self.pg.listen)} port {self.pg.port} "
                                     "(TCP clients need YARDSTICK_PG_PASSWORD)")
                self.say("postgres", f"GPU nodes: DATABASE_URL={self.pg.url_for(host)}")
        if self.redis is not None:
            self.say("redis", f"starting embedded Redis on {self.redis.socket_path}")
            # A server left by an `up` that was killed: this runner holds the lock, so it is ours.
            if self.redis.is_running():
                self.redis.stop()
            server = Child("redis", self.redis.command(), server=self.redis)
            self._start_server(server)
            self.servers.append(server)

    @staticmethod
    def _reachable_host(addresses):
        """The address other machines reach this one at: a listen address, or this host's name for a wildcard."""
        for address in addresses:
            if address not in ("*", "0.0.0.0", "::"):
                return f"[{address}]" if ":" in address else address
        return socket.getfqdn()

    def _start_server(self, child):
        """(Re)start an embedded server on its data dir; raise ServiceError when it does not come up."""
        if child.server is self.redis:
            self.redis.start(daemonize=False)
            child.process = self.redis.process
            self.tell_watchdog()
            # Its banner and notices are for its file; `up` reports its start, exit and restart.
            self._start_readers(child, [(child.process.stdout, logs.show_nothing)])
            pid = child.process.pid
        else:
            self.pg.start()
            pid = self.pg.pid()
        child.started_at = time.monotonic()
        child.restart_at = None
        return pid

    def _exit_reason(self, child):
        """Why a supervised entry is down, or None while it runs."""
        if child.server is not None and child.server is self.pg:
            return None if self.pg.is_running() else "stopped (no postmaster on its data dir)"
        code = child.process.poll()
        return None if code is None else f"exited with code {code}"

    def prepare_database(self):
        """Migrate, and on first run create the admin user and the default alert rules; return the admin's password
        when it was just made."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group
        from django.core.management import call_command

        from alerts.models import AlertRule  # a model: importable once Django is set up, as those above

        self.say("up", "applying migrations")
        call_command("migrate", interactive=False, verbosity=0)
        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            return None
        password = secrets.token_urlsafe(12)
        user = User.objects.create_superuser("admin", email="", password=password)
        user.groups.add(Group.objects.get_or_create(name="admin")[0])
        AlertRule.create_defaults()
        path = self.settings.DATA_DIR / "admin-password"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        from django.db import connections

        connections.close_all()
        return password

    def start_child(self, child):
        env = dict(os.environ, PYTHONUNBUFFERED="1", **child.env)
        # Two pipes: log records (and tracebacks) come on stderr, banners and access logs on stdout, and a
        # line that continues a record is told apart from an unrelated one by the stream it comes on.
        child.process = subprocess.Popen(
            child.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env=env, cwd=str(self.settings.BASE_DIR), pass_fds=child.pass_fds,
            start_new_session=True,  # its own process group: Ctrl-C reaches the runner only
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        self.tell_watchdog()
        self.say("up", f"started {child.name} (pid {child.process.pid})")  # before any line of its own
        self._start_readers(child, [(child.process.stdout, self._for_people()),
                                    (child.process.stderr, self._for_people())])

    def health(self):
        try:
            with urllib.request.urlopen(self.url + "healthz", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")
        except (OSError, ValueError):
            return None, None

    def wait_until_ready(self, password):
        deadline = time.monotonic() + self.ready_timeout_s
        status, body = None, None
        while not self.stopping.is_set() and time.monotonic() < deadline:
            self.check_children()
            status, body = self.health()
            if status == 200:
                break
            self.stopping.wait(1.0)
        if self.stopping.is_set():
            return
        if status != 200:
            failing = ", ".join(
                f"{name}: {check['detail']}" for name, check in (body or {}).get("checks", {}).items()
                if not check["ok"]
            ) or "web server not answering"
            self.say("up", f"not everything answers after {self.ready_timeout_s} s ({failing}); still trying")
        # The URL and the login come last, where the eye lands; up.log keeps them (the password only in its file).
        kept = self.settings.DATA_DIR / "admin-password"
        self.say("up", f"{'ready' if status == 200 else 'started'}; {self._where_logs_are()}; Ctrl-C stops everything")
        self.say("up", f"Yardstick is at {self.url}")
        if password:
            self.say("up", f"log in as admin / {password}   (shown once; kept in {kept})",
                     to_file=f"log in as admin (password shown once; kept in {kept})")
        else:
            self.say("up", f"log in as admin (password in {kept})")

    def _where_logs_are(self):
        return f"full logs: {self.log_dir}/<part>.log (up.log: these lines)"

    def supervise(self):
        while not self.stopping.is_set():
            self.check_children()
            self.stopping.wait(0.5)

    def check_children(self):
        now = time.monotonic()
        for child in self.servers + self.children:
            if child.process is None and child.server is None:
                continue
            reason = self._exit_reason(child)
            if reason is None:
                if now - child.started_at > STABLE_AFTER_S:
                    child.backoff_s = BACKOFF_MIN_S
                continue
            if child.restart_at is None:
                child.restart_at = now + child.backoff_s
                self._drain(child)  # the lines it wrote before it ended come before the one saying it did
                self.say("up", f"{child.name} {reason}; restarting in {child.backoff_s:.0f} s")
                self._show_last_lines(child)
                child.backoff_s = min(child.backoff_s * 2, BACKOFF_MAX_S)
            elif now >= child.restart_at and not self.stopping.is_set():
                child.restarts += 1
                if child.server is None:
                    self.start_child(child)
                    continue
                try:
                    pid = self._start_server(child)
                except embedded.ServiceError as err:
                    # Still down: the next check schedules the next try, with a longer wait.
                    child.restart_at = None
                    if child.server is self.redis:
                        self.redis.stop()  # one that started but never answered must not linger
                    self.say("up", f"{child.name} did not start again: {err}")
                    continue
                self.say("up", f"started {child.name} again on its data (pid {pid})")

    def _stop_wave(self, children):
        """SIGTERM `children` and wait for them, killing (with their groups) those still running after the grace."""
        if not children:
            return
        self.say("up", "stopping " + ", ".join(c.name for c in children))
        for child in children:
            # The main process only: a Celery worker then finishes (or cooperatively
            # stops) its tasks; SIGTERM to its pool processes would kill them mid-step.
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("up", f"{child.name} did not stop in {STOP_GRACE_S:.0f} s; killing it")
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait()

    def stop_all(self):
        self.stopping.set()
        running = [c for c in reversed(self.children) if c.process is not None and c.process.poll() is None]
        # The web server last: a job stopping at its flag writes its checkpoint and its last metrics to the web's
        # tracking API, so the workers stop (each within the grace) while it still answers.
        web = [c for c in running if c.name.startswith("web")]
        self._stop_wave([c for c in running if c not in web])
        self._stop_wave(web)
        for child in self.children:
            if child.process is not None:
                # Pool processes of a worker that was killed: their group goes too.
                _signal_group(child.process, signal.SIGKILL)
            self._drain(child)  # its last lines land before "stopped"
        if self.redis is not None:
            self.say("redis", "stopping")
            self.redis.stop()
            for server in self.servers:
                self._drain(server)
        if self.pg is not None:
            self.say("postgres", "stopping")
            self.pg.stop()
        self.say("up", "stopped")
        for log in [child.log for child in self.children + self.servers] + [self.up_log]:
            if log is not None:
                log.close()


def own_packages(settings):
    """The top-level packages of Yardstick's own apps (collector, trainer, ...): their INFO records are for people."""
    from django.apps import apps

    return {config.name for config in apps.get_app_configs() if Path(config.path).parent == settings.BASE_DIR}


def _signal_group(process, sig):
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
