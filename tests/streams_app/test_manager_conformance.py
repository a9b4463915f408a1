"""The `StreamManager` conformance suite: every method and error, on every backend.

The database backend runs on SQLite or PostgreSQL depending on DATABASE_URL. Readers are async
and refresh their database connection on every look, so these tests commit for real.
"""

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from streams_app.backends.base import StreamManager
from streams_app.backends.types import (
    ChunkBatch,
    ChunkEvent,
    EndEvent,
    FailEvent,
    ResyncEvent,
    StreamStatus,
)
from streams_app.chunks import TextDelta
from streams_app.errors import InvalidChunk, StreamClosed, StreamNotFound, WriterSuperseded
from streams_app.models import Stream
from tests.streams_app.writing import text, writer_with

pytestmark = pytest.mark.django_db(transaction=True)


UNREACHABLE_LAYER = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1", "socket_connect_timeout": 1}]},
    }
}


def deltas(events) -> list:
    """Summarize events: chunk deltas as strings, other events as tuples."""
    summary = []
    for event in events:
        match event:
            case ChunkEvent():
                summary.append(event.chunk["delta"])
            case ResyncEvent():
                summary.append(("resync", event.from_sequence, event.reason))
            case EndEvent():
                summary.append(("end", event.final_output))
            case FailEvent():
                summary.append(("fail", event.error))
    return summary


async def read(manager: StreamManager, stream_id: str, from_sequence: int = 0, *, count=None):
    """Return a reader's events until the stream is over (or `count` events), within 5 s."""
    reader = await manager.acreate_resumable_reader(stream_id, from_sequence)
    events = []
    try:
        async with asyncio.timeout(5):
            async for event in reader:
                events.append(event)
                if count is not None and len(events) == count:
                    break
    finally:
        await reader.aclose()
    return events


def read_all(manager: StreamManager, stream_id: str, from_sequence: int = 0, **kwargs) -> list:
    return async_to_sync(read)(manager, stream_id, from_sequence, **kwargs)


# Writers


def test_writes_get_consecutive_sequences_starting_at_1(manager):
    writer = manager.create_writer("st", "run-1", "researcher")

    assert writer.write(text("a")) == 1
    assert writer.write_many([text("b"), text("c")]) == [2, 3]
    assert writer.write_many([]) == []

    stored = manager.get_all_chunks("st")
    assert [(c.sequence, c.chunk["delta"]) for c in stored] == [(1, "a"), (2, "b"), (3, "c")]


def test_writer_fills_in_agent_type_and_accepts_typed_chunks(manager):
    writer = manager.create_writer("st", "run-1", "researcher")

    writer.write(text("dict"))
    writer.write(TextDelta(step=1, session_id="s-1", agent_type="other", delta="typed"))

    first, second = (c.chunk for c in manager.get_all_chunks("st"))
    assert (first["agentType"], second["agentType"]) == ("researcher", "other")
    assert second["sessionId"] == "s-1"
    assert isinstance(first["timestamp"], int)


def test_an_invalid_chunk_stores_nothing_of_its_batch(manager):
    writer = writer_with(manager, "a")

    with pytest.raises(InvalidChunk):
        writer.write_many([text("b"), {"type": "text_delta", "step": 0}])
    with pytest.raises(InvalidChunk):
        writer.write({**text("c"), "type": "shouting"})

    assert [c.sequence for c in manager.get_all_chunks("st")] == [1]
    assert writer.write(text("d")) == 2


def test_closing_a_writer_leaves_the_stream_open(manager):
    writer = writer_with(manager, "a")

    writer.close()

    with pytest.raises(RuntimeError, match="closed"):
        writer.write(text("late"))
    assert manager.get_stream_info("st").status == StreamStatus.ACTIVE
    assert manager.create_writer("st", "run-1", "researcher").write(text("b")) == 2


def test_appending_to_a_stream_no_writer_opened_raises(manager):
    with pytest.raises(StreamNotFound) as caught:
        manager.append_chunks("ghost", [text("a")])

    assert caught.value.code == "stream-not-found"


def test_an_exclusive_writer_fences_out_the_exclusive_writers_before_it(manager):
    shared = manager.create_writer("st", "run-1", "researcher")
    first = manager.create_writer("st", "run-1", "researcher", exclusive=True)
    first.write(text("a"))
    second = manager.create_writer("st", "run-1", "researcher", exclusive=True)

    with pytest.raises(WriterSuperseded):
        first.write(text("from the superseded writer"))
    second.write(text("b"))
    shared.write(text("c"))  # Writers that are not exclusive are never fenced.

    assert deltas(read_all(manager, "st", count=3)) == ["a", "b", "c"]
    assert manager.get_stream_info("st").total_chunks == 3


def test_stream_info_reports_status_counts_and_run(manager):
    assert manager.get_stream_info("st") is None
    writer_with(manager, "a", "b")

    info = manager.get_stream_info("st")

    assert (info.stream_id, info.status, info.total_chunks, info.latest_sequence) == (
        "st",
        StreamStatus.ACTIVE,
        2,
        2,
    )
    assert (info.run_id, info.agent_type) == ("run-1", "researcher")
    assert info.created_at <= info.updated_at


# Status


def test_ending_a_stream(manager):
    writer = writer_with(manager, "a")

    manager.end_stream("st", {"answer": 42})
    manager.end_stream("st", {"answer": "ignored"})

    assert manager.get_stream_info("st").status == StreamStatus.ENDED
    assert deltas(read_all(manager, "st")) == ["a", ("end", {"answer": 42})]
    with pytest.raises(StreamClosed) as caught:
        writer.write(text("late"))
    assert caught.value.details["status"] == "ended"
    with pytest.raises(StreamClosed):
        manager.fail_stream("st", "too late")


def test_a_new_writer_reopens_a_finished_stream_and_sequences_carry_on(manager):
    writer_with(manager, "a")
    manager.end_stream("st", "first")

    writer = manager.create_writer("st", "run-2", "researcher")

    assert manager.get_stream_info("st").status == StreamStatus.ACTIVE
    assert manager.get_stream_info("st").run_id == "run-2"
    assert writer.write(text("b")) == 2
    manager.end_stream("st", "second")
    assert deltas(read_all(manager, "st")) == ["a", "b", ("end", "second")]


def test_a_writer_knows_the_streams_last_sequence(manager):
    assert manager.create_writer("st", "run-1", "researcher").last_sequence == 0
    writer_with(manager, "a", "b")

    writer = manager.create_writer("st", "run-2", "researcher", exclusive=True)

    assert writer.last_sequence == 2
    writer.write_many([text("c"), text("d")])
    assert writer.last_sequence == 4 == manager.get_stream_info("st").latest_sequence


def test_a_failed_stream_has_no_reader(manager):
    writer_with(manager, "a")

    manager.fail_stream("st", "LLM down")
    manager.fail_stream("st", "again")

    info = manager.get_stream_info("st")
    assert (info.status, info.error) == (StreamStatus.FAILED, "LLM down")
    assert manager.create_reader("st") is None
    assert manager.create_resumable_reader("st", 1) is None
    with pytest.raises(StreamClosed):
        manager.end_stream("st")


def test_a_reader_following_a_stream_that_fails_receives_the_failure(manager):
    writer_with(manager, "a")

    async def scenario():
        reader = asyncio.create_task(read(manager, "st"))
        await asyncio.sleep(0.05)
        await manager.afail_stream("st", "LLM down")
        return await reader

    assert deltas(async_to_sync(scenario)()) == ["a", ("fail", "LLM down")]


def test_pausing_refuses_writes_until_resumed(manager):
    writer = writer_with(manager, "a")

    manager.pause_stream("st")
    manager.pause_stream("st")

    assert manager.get_stream_info("st").status == StreamStatus.PAUSED
    with pytest.raises(StreamClosed):
        writer.write(text("while paused"))
    manager.resume_stream("st")
    manager.resume_stream("st")
    assert writer.write(text("b")) == 2
    manager.end_stream("st")
    with pytest.raises(StreamClosed):
        manager.pause_stream("st")
    with pytest.raises(StreamClosed):
        manager.resume_stream("st")


def test_status_changes_of_unknown_streams_raise(manager):
    for change in (manager.end_stream, manager.pause_stream, manager.resume_stream):
        with pytest.raises(StreamNotFound):
            change("ghost")
    with pytest.raises(StreamNotFound):
        manager.fail_stream("ghost", "x")


# Content


def test_chunks_by_page_and_by_step(manager):
    writer = manager.create_writer("st", "run-1", "researcher")
    for step in (0, 0, 1, 2, 2):
        writer.write(text(f"s{step}", step=step))

    page = manager.get_chunks("st", after_sequence=1, limit=2)
    rest = manager.get_chunks("st", after_sequence=3, limit=10)

    assert ([c.sequence for c in page.chunks], page.has_more, page.latest_sequence) == (
        [2, 3],
        True,
        5,
    )
    assert ([c.sequence for c in rest.chunks], rest.has_more) == ([4, 5], False)
    assert [c.sequence for c in manager.get_chunks_from_step("st", 1)] == [3, 4, 5]
    assert manager.get_chunks_from_step("st", 3) == []


def test_content_of_unknown_streams_raises(manager):
    with pytest.raises(StreamNotFound):
        manager.get_all_chunks("ghost")
    with pytest.raises(StreamNotFound):
        manager.get_chunks("ghost")
    with pytest.raises(StreamNotFound):
        manager.get_chunks_from_step("ghost", 0)


# Readers


def test_a_reader_replays_stored_chunks_then_ends(manager):
    writer_with(manager, *"abcde")
    manager.end_stream("st", "done")

    events = read_all(manager, "st")

    assert deltas(events) == [*"abcde", ("end", "done")]
    assert [e.sequence for e in events if isinstance(e, ChunkEvent)] == [1, 2, 3, 4, 5]
    assert events[0].to_wire() == {"type": "chunk", "sequence": 1, "chunk": events[0].chunk}
    assert events[-1].to_wire() == {"type": "end", "finalOutput": "done"}


def test_a_resumable_reader_starts_after_its_cursor(manager):
    writer_with(manager, *"abcde")
    manager.end_stream("st")

    assert deltas(read_all(manager, "st", 3)) == ["d", "e", ("end", None)]
    assert deltas(read_all(manager, "st", 5)) == [("end", None)]
    with pytest.raises(ValueError, match="from_sequence"):
        manager.create_resumable_reader("st", -1)


def test_a_reader_follows_chunks_written_after_it_started(manager):
    writer = writer_with(manager, "a")

    async def scenario():
        reader = asyncio.create_task(read(manager, "st"))
        for label in "bcd":
            await asyncio.sleep(0.01)
            await writer.awrite(text(label))
        await manager.aend_stream("st", "done")
        return await reader

    assert deltas(async_to_sync(scenario)()) == [*"abcd", ("end", "done")]


def test_a_reader_of_a_stream_not_yet_created_waits_for_its_writer(manager):
    async def scenario():
        reader = asyncio.create_task(read(manager, "later"))
        await asyncio.sleep(0.05)
        writer = await manager.acreate_writer("later", "run-1", "researcher")
        await writer.awrite(text("first"))
        await manager.aend_stream("later")
        return await reader

    assert deltas(async_to_sync(scenario)()) == ["first", ("end", None)]


def test_next_events_returns_nothing_when_the_timeout_passes(manager):
    writer_with(manager, "a")

    async def scenario():
        reader = await manager.acreate_reader("st")
        try:
            first = await reader.next_events(timeout=1)
            quiet = await reader.next_events(timeout=0.1)
        finally:
            await reader.aclose()
        return first, quiet

    first, quiet = async_to_sync(scenario)()
    assert (deltas(first), quiet) == (["a"], [])


# Cleanup, reset, trimming


def test_cleanup_to_step_drops_later_steps_and_readers_resync(manager):
    writer = manager.create_writer("st", "run-1", "researcher")
    writer.write_many([text("a", step=1), text("b", step=1), text("c", step=2), text("d", step=2)])

    assert manager.cleanup_to_step("st", 1) == 2
    assert manager.cleanup_to_step("st", 1) == 0

    assert [c.sequence for c in manager.get_all_chunks("st")] == [1, 2]
    assert manager.get_stream_info("st").total_chunks == 2
    assert writer.write(text("c2", step=2)) == 6  # 5 is skipped: nothing continues cursor 4.
    manager.end_stream("st")
    assert deltas(read_all(manager, "st", 4)) == [("resync", 2, "retracted"), "c2", ("end", None)]
    assert deltas(read_all(manager, "st", 2)) == ["c2", ("end", None)]


def test_reset_stream_empties_and_reopens_it(manager):
    writer_with(manager, *"abc")
    manager.end_stream("st", "old")

    manager.reset_stream("st")

    info = manager.get_stream_info("st")
    assert (info.status, info.total_chunks) == (StreamStatus.ACTIVE, 0)
    assert manager.get_all_chunks("st") == []
    writer = manager.create_writer("st", "run-2", "researcher")
    assert writer.write(text("fresh")) == 5
    manager.end_stream("st", "new")
    assert deltas(read_all(manager, "st", 3)) == [
        ("resync", 0, "retracted"),
        "fresh",
        ("end", "new"),
    ]
    assert deltas(read_all(manager, "st")) == ["fresh", ("end", "new")]


def test_max_chunks_trims_the_oldest_and_lagging_readers_resync(manager_class):
    manager = manager_class(max_chunks=3, poll_interval=0.02)
    writer_with(manager, *"abcde")
    manager.end_stream("st")

    assert [c.sequence for c in manager.get_all_chunks("st")] == [3, 4, 5]
    assert manager.get_stream_info("st").total_chunks == 3
    assert deltas(read_all(manager, "st")) == [("resync", 2, "trimmed"), *"cde", ("end", None)]
    assert deltas(read_all(manager, "st", 3)) == [*"de", ("end", None)]


def test_max_chunks_must_be_positive(manager_class):
    with pytest.raises(ValueError, match="max_chunks"):
        manager_class(max_chunks=0)


def test_purge_removes_only_streams_finished_before_the_cutoff(manager):
    for stream_id in ("old-ended", "old-failed", "old-active", "new-ended"):
        writer_with(manager, "x", stream_id=stream_id)
    manager.end_stream("old-ended")
    manager.fail_stream("old-failed", "boom")
    time.sleep(0.002)
    cutoff = timezone.now()
    time.sleep(0.002)
    manager.end_stream("new-ended")

    assert manager.purge_streams(cutoff) == 2

    assert manager.get_stream_info("old-ended") is None
    assert manager.get_stream_info("old-failed") is None
    assert manager.get_stream_info("old-active") is not None
    assert manager.get_stream_info("new-ended") is not None


def test_purge_with_a_limit_takes_the_oldest_first(manager):
    for stream_id in ("first", "second", "third"):
        writer_with(manager, "x", stream_id=stream_id)
        manager.end_stream(stream_id)
        time.sleep(0.002)

    assert manager.purge_streams(timezone.now(), limit=2) == 2

    assert [manager.get_stream_info(s) is None for s in ("first", "second", "third")] == [
        True,
        True,
        False,
    ]
    assert manager.purge_streams(timezone.now(), limit=2) == 1


def test_fail_streams_fails_only_the_live_ones_and_readers_see_it(manager):
    for stream_id in ("active", "paused", "ended"):
        writer_with(manager, "x", stream_id=stream_id)
    manager.pause_stream("paused")
    manager.end_stream("ended")

    assert manager.fail_streams(["active", "paused", "ended", "missing"], "expired") == 2

    assert [manager.get_stream_info(s).status for s in ("active", "paused", "ended")] == [
        "failed",
        "failed",
        "ended",
    ]
    assert manager.get_stream_info("active").error == "expired"


def test_delete_streams_takes_their_chunks(manager):
    for stream_id in ("a", "b", "kept"):
        writer_with(manager, "x", "y", stream_id=stream_id)

    assert manager.delete_streams(["a", "b", "missing"]) == 2

    assert [manager.get_stream_info(s) is None for s in ("a", "b", "kept")] == [True, True, False]
    manager.create_writer("a", "run", "agent")
    assert manager.get_chunks("a").chunks == []  # A stream made again under its id is empty.


def test_delete_stream(manager):
    writer_with(manager, "a")

    assert manager.delete_stream("st") is True
    assert manager.delete_stream("st") is False
    assert manager.get_stream_info("st") is None


def test_cleanup_and_reset_of_unknown_streams_raise(manager):
    with pytest.raises(StreamNotFound):
        manager.cleanup_to_step("ghost", 0)
    with pytest.raises(StreamNotFound):
        manager.reset_stream("ghost")


def test_every_method_has_an_async_twin(manager):
    names = sorted(StreamManager.__abstractmethods__ - {"subscribe"})

    for name in names:
        assert asyncio.iscoroutinefunction(getattr(manager, f"a{name}")), name

    async def scenario():
        writer = await manager.acreate_writer("st", "run-1", "researcher")
        await writer.awrite_many([text("a"), text("b")])
        await writer.aclose()
        return await manager.aget_stream_info("st")

    assert async_to_sync(scenario)().latest_sequence == 2


@override_settings(CHANNEL_LAYERS=UNREACHABLE_LAYER)
def test_with_the_channel_layer_down_readers_get_everything_by_polling():
    from streams_app.backends.orm import ORMStreamManager

    manager = ORMStreamManager(poll_interval=0.05)
    writer = writer_with(manager, "a")

    async def scenario():
        reader = asyncio.create_task(read(manager, "st"))
        for label in "bc":
            await asyncio.sleep(0.05)
            await writer.awrite(text(label))
        await manager.aend_stream("st")
        return await reader

    assert deltas(async_to_sync(scenario)()) == [*"abc", ("end", None)]
    assert Stream.objects.get(pk="st").chunk_count == 3


# Appends to several streams at once


def test_batches_for_several_streams_are_each_stored_whole_or_refused_alone(manager):
    first = manager.create_writer("first", "run-1", "researcher")
    first.write(text("a"))
    second = manager.create_writer("second", "run-1", "researcher", exclusive=True)
    fenced = manager.create_writer("fenced", "run-1", "researcher", exclusive=True)
    manager.create_writer("fenced", "run-2", "researcher", exclusive=True)  # Supersedes it.
    manager.create_writer("ended", "run-1", "researcher").write(text("x"))
    manager.end_stream("ended")
    batch = [text("b"), text("c")]

    results = manager.append_batches(
        [
            ChunkBatch("first", first.to_wire(batch)),
            ChunkBatch("second", second.to_wire([text("d")]), second.epoch),
            ChunkBatch("fenced", fenced.to_wire([text("lost")]), fenced.epoch),
            ChunkBatch("ended", first.to_wire([text("lost")])),
            ChunkBatch("missing", first.to_wire([text("lost")])),
        ]
    )

    assert results[:2] == [[2, 3], [1]]
    assert [type(result) for result in results[2:]] == [
        WriterSuperseded,
        StreamClosed,
        StreamNotFound,
    ]
    assert [c.chunk["delta"] for c in manager.get_all_chunks("first")] == ["a", "b", "c"]
    assert [c.chunk["delta"] for c in manager.get_all_chunks("second")] == ["d"]
    assert manager.get_all_chunks("fenced") == []
    assert [c.chunk["delta"] for c in manager.get_all_chunks("ended")] == ["x"]
    assert manager.get_stream_info("first").total_chunks == 3
    assert manager.append_batches([]) == []


def test_chunks_appended_in_batches_reach_a_reader_in_order(manager):
    writers = {s: manager.create_writer(s, "run-1", "researcher") for s in ("one", "two")}

    for n in range(3):
        manager.append_batches(
            [ChunkBatch(s, w.to_wire([text(f"{s}{n}")])) for s, w in writers.items()]
        )
    manager.end_stream("one")

    assert deltas(read_all(manager, "one")) == ["one0", "one1", "one2", ("end", None)]
