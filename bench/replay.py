"""Replay: a client connecting to an ended stream of stored chunks, timed until the `end` event."""

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.harness import Row, Table
from bench.live import DELIVERY_TIMEOUT, Fanout, Live, sse_subscriber, websocket_subscriber
from bench.raw_chunks import delta_input
from streams_app.backends import get_stream_manager

# Chunks per `write_many` while filling the stream.
WRITE_BATCH = 1000
CLIENTS: dict[str, Callable[..., Awaitable[None]]] = {
    "WebSocket": websocket_subscriber,
    "SSE": sse_subscriber,
}


def replay_table(live: Live, chunks: int, repeats: int, target_ms: float) -> Table:
    """Time each client replaying a stream of `chunks` stored chunks, connect to end event."""
    writer = live.new_stream()
    for start in range(0, chunks, WRITE_BATCH):
        writer.write_many([delta_input(writer.stream_id)] * min(WRITE_BATCH, chunks - start))
    final_output = {"chunks": chunks}
    get_stream_manager().end_stream(writer.stream_id, final_output)
    timings = asyncio.run(_replays(live, writer.stream_id, chunks, repeats, final_output))
    rows = [
        Row(
            metric=f"{label} ms",
            orm=statistics.median(runs),
            target=target_ms if label == "WebSocket" else None,
            precision=1,
        )
        for label, runs in timings.items()
    ]
    return Table(
        title=(
            f"replay of {chunks:,} stored chunks of an ended stream, connect to end event "
            f"(median of {repeats} runs per client after 1 warm-up, clients alternating)"
        ),
        rows=rows,
        notes=[
            "runs (ms): "
            + "; ".join(
                f"{label} " + ", ".join(f"{ms:.0f}" for ms in runs)
                for label, runs in timings.items()
            ),
            f"every client received sequences 1 to {chunks:,} once, in order, then the end",
        ],
        columns=("Helix", "raw", "raw"),
    )


async def _replays(
    live: Live, session_id: str, chunks: int, repeats: int, final_output: object
) -> dict[str, list[float]]:
    """Replay the stream with each client in turn, a warm-up round first; return ms per run."""
    timings: dict[str, list[float]] = {label: [] for label in CLIENTS}
    for round_ in range(1 + repeats):
        labels = list(CLIENTS) if round_ % 2 else list(reversed(CLIENTS))
        for label in labels:
            fanout = Fanout(1)
            received = fanout.received[0]
            began = time.perf_counter_ns()
            await asyncio.wait_for(
                CLIENTS[label](live.server, live.cookie, session_id, fanout, received),
                DELIVERY_TIMEOUT,
            )
            expected_final = {"type": "end", "finalOutput": final_output}
            if received.sequences != list(range(1, chunks + 1)) or received.final != expected_final:
                raise RuntimeError(
                    f"A {label} replay received {len(received.sequences)} chunks (first "
                    f"{received.sequences[:5]}, last {received.sequences[-5:]}) and "
                    f"{received.final}, not sequences 1 to {chunks} and the end."
                )
            if round_:
                timings[label].append((received.finished_at - began) / 1e6)
    return timings
