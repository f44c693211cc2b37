"""Django's database sessions, read with one prepared statement instead of a query the ORM builds.

Every page and API call behind the login wall reads its session first. The
ORM spent 1.6 ms of CPU building and running `Session.objects.get(...)` on the
2-core machine (issue 29), the same SELECT on a cursor 0.3 ms. Writes, expiry,
keys and the cookie are Django's (django.contrib.sessions.backends.db).
"""

import functools

from django.contrib.sessions.backends import db
from django.db import connections, router
from django.utils import timezone


@functools.cache
def _select(model):
    qn = connections[router.db_for_read(model)].ops.quote_name
    column = {f.name: qn(f.column) for f in model._meta.concrete_fields}
    return (f"SELECT {column['session_data']}, {column['expire_date']} FROM {qn(model._meta.db_table)} "
            f"WHERE {column['session_key']} = %s AND {column['expire_date']} > %s")


class SessionStore(db.SessionStore):
    """settings.SESSION_ENGINE: db.SessionStore whose read is a plain SELECT of the same row."""

    def _get_session_from_db(self):
        model = self.model
        with connections[router.db_for_read(model)].cursor() as cur:
            cur.execute(_select(model), [self.session_key, timezone.now()])
            row = cur.fetchone()
        if row is None:  # none, or expired: what the ORM's DoesNotExist meant
            self._session_key = None
            return None
        return model(session_key=self.session_key, session_data=row[0], expire_date=row[1])
