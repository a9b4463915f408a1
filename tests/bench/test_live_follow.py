"""The live benchmarks' WebSocket client resumes a dropped stream after the last sequence it got."""

import json
from urllib.parse import parse_qs, urlsplit

import pytest
import websockets
from websockets.asyncio.server import serve

from bench.live import RESUMES, Server, follow_stream


def _chunk(sequence: int) -> str:
    return json.dumps({"type": "chunk", "sequence": sequence, "chunk": {"type": "text_delta"}})


class _DroppingStream:
    """A stream of `chunks` chunks and an end, sending one event per connection.

    It resets the first `drops` connections without a closing handshake, as Daphne does to a
    client that answers its close too late, and records where each connection resumed.
    """

    def __init__(self, chunks: int, drops: int) -> None:
        self.chunks, self.drops = chunks, drops
        self.resumed_from: list[int] = []

    async def handle(self, connection) -> None:
        after = int(parse_qs(urlsplit(connection.request.path).query)["fromSequence"][0])
        self.resumed_from.append(after)
        if after < self.chunks:
            await connection.send(_chunk(after + 1))
        else:
            await connection.send(json.dumps({"type": "end", "sequence": after + 1}))
        if len(self.resumed_from) <= self.drops:
            connection.transport.abort()
        else:
            await connection.wait_closed()


async def _follow(stream: _DroppingStream) -> tuple[int, list[dict]]:
    taken: list[dict] = []

    def take(event: dict, arrival: int) -> bool:
        taken.append(event)
        return event["type"] != "chunk"

    async with serve(stream.handle, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        resumed = await follow_stream(
            Server(port), f"ws://127.0.0.1:{port}/stream", "sessionid=x", take
        )
    return resumed, taken


async def test_a_dropped_stream_is_resumed_after_its_last_sequence_until_its_end() -> None:
    stream = _DroppingStream(chunks=2, drops=2)

    resumed, taken = await _follow(stream)

    assert resumed == 2
    assert stream.resumed_from == [0, 1, 2]
    assert [(event["type"], event["sequence"]) for event in taken] == [
        ("chunk", 1),
        ("chunk", 2),
        ("end", 3),
    ]


async def test_a_stream_that_keeps_dropping_fails_after_the_last_resumption() -> None:
    stream = _DroppingStream(chunks=RESUMES + 1, drops=RESUMES + 1)

    with pytest.raises(websockets.ConnectionClosedError):
        await _follow(stream)

    assert len(stream.resumed_from) == RESUMES + 1
