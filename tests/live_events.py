"""Run a producer and collect what it published: for tests of live events without a browser."""

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def run_collecting(fn, topics, quiet_s=0.5):
    """Call `fn()` in a thread (its own database connection) while subscribed to `topics`; return
    (its result, the events published on them, in order, until none came for `quiet_s`).

    `fn` has sent what it publishes by the time it returns (yardstick.live sends on commit, in the
    committing thread): the quiet time covers their delivery, not a producer still at work."""
    from django.db import connection

    from yardstick.live import group_name

    layer = get_channel_layer()

    def in_thread():
        try:
            return fn()
        finally:
            connection.close()

    async def scenario():
        channel = await layer.new_channel()
        for topic in topics:
            await layer.group_add(group_name(topic), channel)
        result = await asyncio.get_running_loop().run_in_executor(None, in_thread)
        events = []
        try:
            while True:
                events.append(await asyncio.wait_for(layer.receive(channel), timeout=quiet_s))
        except asyncio.TimeoutError:
            return result, events

    return async_to_sync(scenario)()
