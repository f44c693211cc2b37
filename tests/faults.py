"""Faults a test can switch on and off: a TCP relay in front of the real PostgreSQL that can be cut.

`DatabaseRelay` listens on 127.0.0.1 and relays every connection to the
suite's PostgreSQL (its Unix socket or host:port). `cut()` closes the
listener and every relayed connection, as a database that went away does
for its clients (new connections are refused, open ones end); `restore()`
listens again on the same port. The database itself stays up for the rest
of the suite.
"""

import socket
import threading


class DatabaseRelay:
    def __init__(self, settings_dict):
        host = settings_dict.get("HOST") or "localhost"
        port = int(settings_dict.get("PORT") or 5432)
        if host.startswith("/"):
            self.target = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self.target = (socket.AF_INET, (host, port))
        self.cfg = settings_dict
        self.port = None
        self._listener = None
        self._open = set()
        self._lock = threading.Lock()

    def url(self):
        from urllib.parse import quote

        auth = quote(self.cfg.get("USER") or "", safe="")
        if self.cfg.get("PASSWORD"):
            auth += ":" + quote(self.cfg["PASSWORD"], safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{self.cfg['NAME']}"

    def start(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port or 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    restore = start

    def cut(self):
        """Refuse new connections and end every open one."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _end(listener)
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            _end(conn)

    stop = cut

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            family, address = self.target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)
            except OSError:
                _end(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for conn in (src, dst):
            with self._lock:
                self._open.discard(conn)
            _end(conn)


def _end(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
