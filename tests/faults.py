"""Faults a test can switch on and off: a TCP relay that can be cut.

`Relay` listens on 127.0.0.1 and relays every connection to its target (a
Unix socket or host:port). `cut()` ends every relayed connection and ends
each new one at once, as a server that went away does for its clients;
`restore()` relays again on the same port; `close()` frees the port. The
port stays bound while cut: a freed port may be taken meanwhile (another
process's outgoing connection gets it as its source port), and the relay
could not listen there again.

`DatabaseRelay` stands in front of the suite's PostgreSQL, which stays up
for the rest of the suite.
"""

import socket
import threading


class Relay:
    def __init__(self, family, address):
        self.target = (family, address)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._open, self._lock, self._cut = set(), threading.Lock(), True
        threading.Thread(target=self._accept, daemon=True).start()

    def restore(self):
        self._cut = False
        return self

    start = restore

    def cut(self):
        with self._lock:
            self._cut = True
            conns, self._open = self._open, set()
        for conn in conns:
            _end(conn)

    def close(self):
        self.cut()
        _end(self._listener)  # the shutdown wakes the thread in accept(), which close() alone leaves listening

    stop = close

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._cut:
                _end(client)
                continue
            family, address = self.target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)
            except OSError:
                _end(client)
                continue
            with self._lock:
                if self._cut:
                    _end(client)
                    _end(upstream)
                    continue
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


class DatabaseRelay(Relay):
    def __init__(self, settings_dict):
        host = settings_dict.get("HOST") or "localhost"
        port = int(settings_dict.get("PORT") or 5432)
        if host.startswith("/"):
            super().__init__(socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            super().__init__(socket.AF_INET, (host, port))
        self.cfg = settings_dict

    def url(self):
        from urllib.parse import quote

        auth = quote(self.cfg.get("USER") or "", safe="")
        if self.cfg.get("PASSWORD"):
            auth += ":" + quote(self.cfg["PASSWORD"], safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{self.cfg['NAME']}"


def _end(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
