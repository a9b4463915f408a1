"""Prometheus metrics of the runtime (the `prometheus-client` library).

Each process counts what it does itself: a worker its steps, model calls, tool calls and
recoveries; every process the chunks it writes and the clients it serves (`streams_app.metrics`).
Prometheus scrapes each process and sums across them: Daphne serves `/metrics`, a worker serves
its own when `HELIX_WORKER_METRICS_PORT` is set (`agents_app.observability.server`). What
belongs to the whole system, runs by status and the broker's queue depth, is read from the
database and the broker when `/metrics` is scraped (`SystemCollector`).
"""

import contextlib
import logging
import time
from collections.abc import Iterator

from celery import current_app
from django.db.models import Count
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sessions_app.models import Run

logger = logging.getLogger(__name__)

# Seconds: a step or a model call takes from milliseconds (a scripted model) to minutes.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

STEPS_STARTED = Counter("helix_steps_started", "Step attempts begun.", ["agent_type"])
STEPS_COMMITTED = Counter("helix_steps_committed", "Steps committed.", ["agent_type"])
STEPS_FAILED = Counter(
    "helix_steps_failed", "Step attempts that raised or failed their run.", ["agent_type"]
)
STEPS_IN_FLIGHT = Gauge(
    "helix_steps_in_flight", "Steps running in this process now.", ["agent_type"]
)
STEP_SECONDS = Histogram(
    "helix_step_duration_seconds", "Step attempts, claim to end.", ["agent_type"], buckets=BUCKETS
)
MODEL_SECONDS = Histogram(
    "helix_model_call_duration_seconds",
    "Model calls, request to the reply's last event.",
    ["agent_type"],
    buckets=BUCKETS,
)
TOOL_SECONDS = Histogram(
    "helix_tool_call_duration_seconds", "Server tool calls.", ["agent_type"], buckets=BUCKETS
)
RECOVERIES = Counter(
    "helix_recoveries",
    "Stalled runs the recovery sweep enqueued again (recovered) or gave up (failed).",
    ["outcome"],
)


@contextlib.contextmanager
def step(agent_type: str) -> Iterator[None]:
    """Count a step attempt: started, in flight, its duration, and failed if it raises."""
    STEPS_STARTED.labels(agent_type).inc()
    in_flight = STEPS_IN_FLIGHT.labels(agent_type)
    in_flight.inc()
    started = time.perf_counter()
    try:
        yield
    except BaseException:
        STEPS_FAILED.labels(agent_type).inc()
        raise
    finally:
        in_flight.dec()
        STEP_SECONDS.labels(agent_type).observe(time.perf_counter() - started)


class SystemCollector(Collector):
    """Runs by status (from the database) and the step queue's depth (from the broker)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("helix_runs", "Runs by status.", labels=["status"])
        counts = dict(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
        for status in Run.Status.values:
            runs.add_metric([status], counts.get(status, 0))
        yield runs
        if (depth := _queue_depth()) is not None:
            yield GaugeMetricFamily(
                "helix_broker_queue_depth",
                "Step tasks waiting in the broker's queue.",
                value=depth,
            )


def _queue_depth() -> int | None:
    """Return how many messages wait in the step queue, or `None` if the broker will not say."""
    queue = current_app.conf.task_default_queue
    with current_app.connection_for_read() as connection:
        try:
            connection.ensure_connection(max_retries=1)
            return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:  # No such queue: Redis drops a list once it is empty.
            return 0
        except Exception:  # An unreachable broker: the metric is left out.
            logger.debug("The broker did not tell the depth of queue %s", queue, exc_info=True)
            return None
