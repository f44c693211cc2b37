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
]
# Fed by the telemetry broadcaster in this process rather than by publishers.
TELEMETRY = re.compile(r"^(fleet|node\.\d+)$")
MAX_TOPICS = 20


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
    """`/ws/live?topics=fleet,job.3`: pushes the events of the topics a page shows.

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
            broadcaster.subscribe(self, telemetry)
        await self.send_json({"topic": "", "kind": "subscribed", "data": {"topics": topics, "refused": refused}})

    async def disconnect(self, code):
        broadcaster.unsubscribe(self)
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, event):
        await self.send_json({"topic": event["topic"], "kind": event["kind"], "data": event["data"]})
