"""Requests to `/api/chat` from a signed-in test client, read to the stream's end."""

import asyncio
import json

from asgiref.sync import async_to_sync
from django.test import AsyncClient


def post_chat(user, body: dict, timeout: float = 30) -> tuple[int, dict, list]:
    """POST /api/chat; return the status, the headers and the SSE data lines (parsed).

    Fails if the stream has not ended within `timeout` seconds.
    """

    async def scenario():
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.post("/api/chat", body, content_type="application/json")
        if not response.streaming:
            return response.status_code, dict(response.headers), response.json()
        text = ""
        async for part in response.streaming_content:
            text += part.decode()
        events = [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]
        parsed = [event if event == "[DONE]" else json.loads(event) for event in events]
        return response.status_code, dict(response.headers), parsed

    async def bounded():
        return await asyncio.wait_for(scenario(), timeout)

    return async_to_sync(bounded)()
