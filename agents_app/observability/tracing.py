"""OpenTelemetry traces: one trace per run, a span per step, and under it the model call and
each tool call, all carrying the session, run and step ids.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: `configure` then installs the SDK with an OTLP
exporter (the standard `OTEL_*` variables configure it) and the Django, Celery and psycopg
instrumentations (a project that installs a tracer provider of its own gets the spans too).
With no provider installed the spans below are skipped: the API's no-op spans would still
switch the current context for each, about a tenth of a millisecond of a step's CPU.

A run's steps may run on any worker, in any task (a time slice's, a redelivery's, the recovery
sweep's), so the trace does not follow the tasks: a run begins with a short `helix.run` span,
whose context its record keeps (`traceparent` in its metadata), and every step's span is its
child.
"""

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import propagate, trace

tracer = trace.get_tracer("helix.agents")
_configured = False


def configure() -> None:
    """Install the SDK and the instrumentations once, if an OTLP endpoint is configured."""
    global _configured
    if _configured or not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "helix"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument()
    _configured = True


def run_started(session_id: str, run_id: str, agent_type: str) -> dict[str, str]:
    """Open and close the run's `helix.run` span; return its context to keep with the run."""
    carrier: dict[str, str] = {}
    if not _recording():
        return carrier
    attributes = {"helix.session_id": session_id, "helix.run_id": run_id}
    with tracer.start_as_current_span(
        "helix.run", attributes={**attributes, "helix.agent_type": agent_type}
    ) as span:
        if span.get_span_context().is_valid:
            propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def step_span(run_metadata: Mapping[str, Any], **ids: Any) -> Iterator[trace.Span]:
    """Run the block in a `helix.step` span, a child of the run's (if its record keeps one)."""
    if not _recording():
        yield trace.INVALID_SPAN
        return
    parent = propagate.extract(run_metadata) if "traceparent" in run_metadata else None
    with tracer.start_as_current_span(
        "helix.step", context=parent, attributes=_attributes(ids)
    ) as span:
        yield span


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """Run the block in a span `helix.<name>`, a child of the current one (the step's)."""
    if not _recording():
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(
        f"helix.{name}", attributes=_attributes(attributes)
    ) as current:
        yield current


def _recording() -> bool:
    """Return whether a tracer provider is installed (until one is, the API's is a proxy)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"helix.{name}": value for name, value in values.items() if value is not None}
