from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.db import database_sync_to_async

from yardstick.auth import has_role
from yardstick.live import group_name


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """`/ws/live?topics=fleet,job.3`: pushes the events of the topics a page shows.

    Only a logged-in user holding the viewer role (or higher) may connect;
    anyone else is closed with code 4401 (not logged in) or 4403 (no role).
    """

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(has_role)(user, "viewer"):
            await self.close(code=4403)
            return
        query = self.scope.get("query_string", b"").decode()
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        self.groups_joined = []
        for topic in filter(None, params.get("topics", "").split(",")):
            try:
                group = group_name(topic)
            except ValueError:
                continue
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, event):
        await self.send_json({"topic": event["topic"], "kind": event["kind"], "data": event["data"]})
