"""The web process's Django handler: each request's middleware and view in one thread, as under WSGI.

Django's ASGI handler builds its middleware chain for async views. Every view
here is synchronous, and so are most middleware, so that chain kept crossing
between the event loop and a thread: into a thread for the sync middleware,
back to the loop at the first middleware that can run async (messages,
clickjacking), into a thread again for each of their hooks and for the view,
and back. Eight crossings a request, each a future, a wake-up of the loop and
a copy of the context. Here the chain is the one WSGI uses, run in one call on
the request's own thread, so a request crosses three times: its
request_started signal, the chain, its close.

The request's own thread: Django gives each request a new one (a
ThreadSensitiveContext of its own, whose executor starts a thread and, at the
end, another to join it). Here the request borrows a one-thread executor from
a small stock and hands it back when it is done, so its threads are reused,
as a WSGI server's are. Each still runs one request at a time, and a thread's
database connection is closed (given back to the pool) when its request ends.
Together, on the 2-core machine under 20 clients: about half of the web
process's CPU a request (issue 29).

How many chains run at once: at most settings.WEB_THREADS (YARDSTICK_WEB_THREADS);
the others wait their turn on the event loop. Python runs one thread at a time, so
twenty requests in twenty threads did not finish sooner than four: they took turns
at every database round trip, and each turn cost the process CPU (20 clients on
the fleet page and /api/fleet, 2 cores: 9.7 ms of CPU a request unbounded, 6.6 with
four views at once; docs/scaling.md, "Requests"). Reading a request's body and
sending its response (a download, a streamed output) run outside the limit: only
views hold a turn.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

# Idle request threads kept for the next requests; more run when more requests are in flight.
KEEP_THREADS = 16


class OneThreadASGIHandler(ASGIHandler):
    """ASGIHandler whose middleware chain is synchronous and runs in one hop, on a reused thread."""

    def __init__(self):
        super().__init__()
        self._idle = []  # one-thread executors not serving a request (touched only by the event loop)
        self._turns = asyncio.Semaphore(settings.WEB_THREADS)  # middleware chains running at once

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's own refusal
        executor = self._idle.pop() if self._idle else ThreadPoolExecutor(1, thread_name_prefix="request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if len(self._idle) < KEEP_THREADS:
                self._idle.append(executor)  # a view still running after a disconnect: the next one waits
            else:
                executor.shutdown(wait=False)

    async def get_response_async(self, request):
        async with self._turns:
            return await sync_to_async(self.get_response, thread_sensitive=True)(request)
