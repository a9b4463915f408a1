"""What operators see: `/metrics` (who may read it, and counters that move while a real worker
runs a run), the stream clients gauge, and the trace of a run: one trace, a span per step, the
model call and each tool call under it."""

import urllib.request

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from agents_app.runs import services
from agents_app.runtime import executor
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus
from tests.agents_app import agents  # noqa: F401 (registers the agents below)
from tests.agents_app.worker import Worker
from tests.live import free_port
from tests.streams_app.sockets import connect
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "metrics-token-for-tests"


@pytest.fixture
def metrics_token(settings):
    settings.HELIX = {**settings.HELIX, "METRICS_TOKEN": TOKEN}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Return the exposition's samples by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_answer_the_token_and_staff_and_refuse_everyone_else(
    metrics_token, owner, django_user_model
):
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    user = Client()
    user.force_login(owner)

    anonymous = Client().get("/metrics")
    wrong = Client().get("/metrics", headers={"authorization": "Bearer not-it"})
    refused = user.get("/metrics")
    by_token = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    by_staff = staff.get("/metrics")

    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "not-authenticated")
    assert wrong.status_code == 401
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "permission-denied")
    for answer in (by_token, by_staff):
        assert answer.status_code == 200
        assert answer["Content-Type"].startswith("text/plain")
        assert ("helix_runs", (("status", "running"),)) in samples(answer.content.decode())
    assert TOKEN not in by_token.content.decode()


def scrape_worker(port: int) -> dict[tuple[str, tuple], float]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return samples(answer.read().decode())


def test_counters_move_while_a_real_worker_runs_a_run(tmp_path, metrics_token, owner):
    port = free_port()
    worker = Worker(
        tmp_path, HELIX_WORKER_METRICS_PORT=str(port), HELIX_METRICS_TOKEN=TOKEN
    ).start()
    agent = (("agent_type", "slow-streamer"),)
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:  # The worker wants the token.
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        before = scrape_worker(port)
        started = services.agent_start(user=owner, agent_type="slow-streamer", message="Go.")
        store = get_session_store()
        wait_for(
            lambda: scrape_worker(port).get(("helix_steps_in_flight", agent)) == 1, what="a step"
        )
        during = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        wait_for(
            lambda: store.get_current_run(started.session_id).status == RunStatus.COMPLETED,
            what="the run's end",
        )
        # The step leaves the gauge just after its commit ends the run: wait for that too.
        wait_for(
            lambda: scrape_worker(port).get(("helix_steps_in_flight", agent)) == 0,
            what="the step's end",
        )
        after = scrape_worker(port)
    finally:
        worker.stop()
    ended = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})

    assert refused.value.code == 401
    assert before.get(("helix_steps_started_total", agent), 0) == 0
    assert after[("helix_steps_started_total", agent)] == 1
    assert after[("helix_steps_committed_total", agent)] == 1
    assert after[("helix_steps_in_flight", agent)] == 0
    assert after[("helix_model_call_duration_seconds_count", agent)] == 1
    assert after[("helix_model_call_duration_seconds_sum", agent)] >= 4  # A 5-second reply.
    assert after[("helix_stream_chunks_written_total", ())] > before.get(
        ("helix_stream_chunks_written_total", ()), 0
    )
    assert samples(during.content.decode())[("helix_runs", (("status", "running"),))] == 1
    system = samples(ended.content.decode())
    assert system[("helix_runs", (("status", "completed"),))] == 1
    assert system[("helix_runs", (("status", "running"),))] == 0


def test_the_queue_depth_is_what_waits_in_the_broker(metrics_token, owner, private_queue):
    def depth() -> float:
        answer = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        return samples(answer.content.decode())[("helix_broker_queue_depth", ())]

    empty = depth()
    for _ in range(3):  # No worker reads this queue: their first steps wait there.
        services.agent_start(user=owner, agent_type="steady", message="Go.")

    assert (empty, depth()) == (0, 3)


async def test_the_clients_gauge_counts_websocket_clients_while_they_follow(owner):
    session = await database_sync_to_async(services.agent_session_create)(
        user=owner, agent_type="slow-streamer"
    )
    gauge = ("helix_stream_clients", {"transport": "websocket"})
    before = REGISTRY.get_sample_value(*gauge) or 0
    communicator = await connect(session.session_id, owner)

    connected, _ = await communicator.connect()
    following = REGISTRY.get_sample_value(*gauge)
    await communicator.disconnect()

    assert connected
    assert following == before + 1
    assert REGISTRY.get_sample_value(*gauge) == before


@pytest.fixture(scope="module")
def spans():
    """Every span this process ends, from here on, in memory."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # The first test to trace installs the SDK.
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def test_a_run_is_one_trace_of_steps_each_with_its_model_call_tools_and_commit(
    spans, owner, private_queue
):
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    spans.clear()
    outcome = executor.run_steps(started.session_id, started.run_id, 1, time_slice=0)
    while outcome.next_step is not None:  # As workers would run the run, a task a step.
        executor.hand_over(started.session_id, outcome.holder)
        outcome = executor.run_steps(
            started.session_id, started.run_id, outcome.next_step, time_slice=0
        )

    ended = spans.get_finished_spans()
    by_id = {span.context.span_id: span for span in ended}
    steps = sorted(
        (s for s in ended if s.name == "helix.step"), key=lambda s: s.attributes["helix.step"]
    )

    def children(parent, name):
        return [s for s in ended if s.name == name and s.parent.span_id == parent.context.span_id]

    assert [s.attributes["helix.step"] for s in steps] == [1, 2, 3]
    assert {s.context.trace_id for s in ended} == {steps[0].context.trace_id}  # One trace.
    run_span = {s.parent.span_id for s in steps}
    assert len(run_span) == 1  # Every step under the run's span, made when it started.
    for step in steps:
        assert step.attributes["helix.session_id"] == started.session_id
        assert step.attributes["helix.run_id"] == started.run_id
        assert step.attributes["helix.agent_type"] == "steady"
        assert len(children(step, "helix.model")) == 1
        assert len(children(step, "helix.commit")) == 1
    tools = [
        [s.attributes["helix.tool_name"] for s in children(step, "helix.tool")] for step in steps
    ]
    assert tools == [["note", "note"], ["note"], []]  # The first two run in threads of their own.
    assert all(by_id.get(s.parent.span_id) for s in ended if s.name == "helix.tool")


def test_traces_cost_nothing_to_set_up_when_no_endpoint_is_configured(monkeypatch):
    from agents_app.observability import tracing

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    provider = trace.get_tracer_provider()
    tracing.configure()

    assert trace.get_tracer_provider() is provider


def test_with_no_tracer_provider_installed_spans_are_skipped(monkeypatch):
    """The API's no-op spans would still switch the current context, each at some cost."""
    from agents_app.observability import tracing

    # As in a process where nothing installed a provider (this one may have, for the test above).
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    outside = context.get_current()
    with (
        tracing.step_span({}, session_id="s", step=1) as step,
        tracing.span("commit", status="running") as commit,
    ):
        inside = context.get_current()

    assert inside is outside
    assert step is commit is trace.INVALID_SPAN
    assert tracing.run_started("s", "r", "steady") == {}
