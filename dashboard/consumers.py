import re
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard.broadcast import broadcaster
from yardstick.auth import has_role
from yardstick.live import group_name

# Topic families and the role each needs. Every family is readable by viewers
# today; a family missing here is refused, so a new one must be added on purpose.
TOPICS = [
    (re.compile(r"^fleet$"), "viewer"),
    (re.compile(r"^jobs$"), "viewer"),
    (re.compile(r"^costs$"), "viewer"),
    (re.compile(r"^job\.\d{1,12}$"), "viewer"),
    (re.compile(r"^node\.\d{1,12}$"), "viewer"),
    (re.compile(r"^campaign\.\d{1,12}$"), "viewer"),
    (re.compile(r"^alerts$"), "viewer"),
]
# Fed by the telemetry broadcaster in this process rather than by publishers.
TELEMETRY = re.compile(r"^(fleet|node\.\d+)$")
MAX_TOPICS = 20
LAYOUT_VERSION = re.compile(r"^[0-9a-f]{1,40}$")  # dashboard.fleetstate.Layout.version
# A frame the socket does not take. RFC 6455's 1003 says it, but Daphne (autobahn) closes only with 1000 or
# 3000-4999, so an application code beside 4401 and 4403; Daphne drops the reason, which other servers send.
BAD_FRAME = 4400


def required_role(topic):
    """The role a user needs to follow `topic`, or None when no one may (an unknown topic)."""
    for pattern, role in TOPICS:
        if pattern.match(topic):
            return role
    return None


def allowed_topics(user, topics):
    """(allowed, refused) topics for `user` (sync: reads the user's groups)."""
    ok, refused = [], []
    for topic in topics[:MAX_TOPICS]:
        role = required_role(topic)
        (ok if role and has_role(user, role) else refused).append(topic)
    return ok, refused + topics[MAX_TOPICS:]


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/live?topics=fleet,job.3[&layout=<version>]`: pushes the events of the topics a page shows
    (`layout`: the fleet layout the page has, which the fleet's welcome then leaves out).

    Only a logged-in user holding the viewer role (or higher) may connect;
    anyone else is closed with code 4401 (not logged in) or 4403 (no role).
    Each topic is checked against the role it needs; the first message says
    which were subscribed and which refused.
    """

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(has_role)(user, "viewer"):
            await self.close(code=4403)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        asked = list(dict.fromkeys(filter(None, (query.get("topics") or [""])[0].split(","))))
        topics, refused = await database_sync_to_async(allowed_topics)(user, asked)
        self.groups_joined = []
        for topic in topics:
            group = group_name(topic)
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()
        telemetry = [t for t in topics if TELEMETRY.match(t)]
        if telemetry:
            self.broadcaster = broadcaster  # this process's (tests stand two processes side by side)
            # The fleet layout the page already has: anything else is no layout (the welcome sends it).
            has = (query.get("layout") or [""])[0]
            self.broadcaster.subscribe(self, telemetry, layout=has if LAYOUT_VERSION.match(has) else None)
        await self.send_json({"topic": "", "kind": "subscribed", "data": {"topics": topics, "refused": refused}})

    async def __call__(self, scope, receive, send):
        # Every way out, a crash included, leaves its groups and the broadcaster: a consumer that died
        # still subscribed kept the telemetry poller reading for no one and its group filling up.
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._leave()

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """The socket only pushes; a page sends nothing. A frame no page sends gets a close that says why
        (4400) instead of an exception, a 1011 close and a server traceback."""
        if bytes_data is not None:
            await self.close(code=BAD_FRAME, reason="binary frames are not accepted")
            return
        try:
            content = await self.decode_json(text_data or "")
        except (ValueError, RecursionError):  # json.JSONDecodeError is a ValueError; [[[[... nested past the limit
            await self.close(code=BAD_FRAME, reason="text frames must be JSON")
            return
        await self.receive_json(content, **kwargs)

    async def disconnect(self, code):
        await self._leave()

    async def _leave(self):
        if getattr(self, "broadcaster", None) is not None:
            self.broadcaster.unsubscribe(self)
        groups, self.groups_joined = getattr(self, "groups_joined", []), []
        for group in groups:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, event):
        await self.send_json({"topic": event["topic"], "kind": event["kind"], "data": event["data"]})
