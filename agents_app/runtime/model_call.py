"""The model phase of a step attempt: the request, the streamed reply, retries and compaction."""

import logging
import time
from dataclasses import replace

from agents_app import conf
from agents_app.llm.base import (
    LLMError,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
    build_adapter,
)
from agents_app.observability import metrics, tracing
from agents_app.runtime.types import Reply, tool_message
from agents_app.runtime.watcher import StepWatch
from sessions_app.connections import release_connection
from sessions_app.storable import storable
from sessions_app.stores.types import Message
from streams_app import chunks
from streams_app.backends.batching import BatchedWriter

logger = logging.getLogger(__name__)


class ModelCall:
    """The attempt's model call (a part of `Attempt`)."""

    def _call_model(self, writer: BatchedWriter, watch: StepWatch) -> Reply:
        """Stream the model's reply to the stream, retrying retryable errors with backoff."""
        measured = self._compact(writer)
        request = LLMRequest(
            system=self._system_prompt(),
            messages=self._history(measured),
            tools=[
                ToolSpec(tool.name, tool.description, tool.json_schema())
                for tool in self.tools.values()
            ],
            model=self.agent.llm.get("model"),
            temperature=self.agent.llm.get("temperature"),
        )
        adapter = build_adapter(self.adapter_context, self.agent.llm)
        release_connection()  # The model is slow: the connection serves other steps meanwhile.
        with self._timed("model_ms"):
            return self._call_with_retries(adapter, request, writer, watch)

    def _call_with_retries(
        self, adapter, request: LLMRequest, writer: BatchedWriter, watch: StepWatch
    ) -> Reply:
        retries, retried = conf.llm_max_retries(), 0
        while True:
            try:
                with (
                    tracing.span("model", model=request.model, attempt=retried + 1),
                    metrics.MODEL_SECONDS.labels(self.state.agent_type).time(),
                ):
                    return self._stream_reply(adapter, request, writer, watch)
            except LLMError as error:
                if not error.retryable or retried == retries or watch.stopped:
                    raise
                logger.warning("LLM call failed (%s); retry %d of %d", error, retried + 1, retries)
                # The failed attempt's deltas go; the retry streams the reply afresh.
                with writer.held():
                    writer.flush()
                    self.streams.cleanup_to_step(self.state.stream_id, self.step - 1)
                time.sleep(conf.llm_retry_backoff_seconds() * 2**retried)
                retried += 1

    def _stream_reply(self, adapter, request: LLMRequest, writer: BatchedWriter, watch) -> Reply:
        text: list[str] = []
        calls: list[ToolCall] = []
        usage: list[Usage] = []
        self.llm_stream = adapter.stream(request)
        if watch.stopped:
            self.llm_stream.close()
        message_id = f"{self.step_id}:assistant"
        for event in self.llm_stream:
            match event:  # What the model says is stored as every backend can store it.
                case TextDelta():
                    delta = storable(event.text)
                    text.append(delta)
                    writer.write(self._chunk(chunks.TextDelta, delta=delta, message_id=message_id))
                case ReasoningDelta():
                    delta = storable(event.text)
                    writer.write(
                        self._chunk(chunks.ReasoningDelta, delta=delta, message_id=message_id)
                    )
                case ToolCall():
                    calls.append(
                        replace(
                            event,
                            id=storable(event.id),
                            name=storable(event.name),
                            arguments=storable(event.arguments),
                        )
                    )
                case Usage():
                    usage.append(event)
        return Reply(text="".join(text), tool_calls=calls, usage=usage)

    def _system_prompt(self) -> str:
        """Return the agent's prompt, then its context blocks' frozen one."""
        own = self.agent.render_system_prompt(self.state.custom_state or {})
        if self.memory is None:
            return own
        return "\n\n".join(part for part in (own, self.memory.freeze_system_prompt()) if part)

    def _compact(self, writer: BatchedWriter) -> list[Message] | None:
        """Compact the branch if it is past the agent's `compact_after`; report a failure.

        Return the active branch if measuring it read it and nothing changed it since.
        """
        if self.memory is None:
            return None
        own_prompt = self.agent.render_system_prompt(self.state.custom_state or {})
        result = self.memory.compact_if_needed(other_prompt=own_prompt)
        if result.error is not None:
            writer.write(
                self._chunk(
                    chunks.Error, error=result.error, code="compaction-failed", recoverable=True
                )
            )
        return result.history

    def _stop_model(self) -> None:
        if self.llm_stream is not None:
            self.llm_stream.close()

    def _history(self, measured: list[Message] | None) -> list[Message]:
        """Return the active branch, or, in a run's first step, the branch it starts from.

        `measured` is the active branch when compaction read it already. Otherwise the step
        goes on with the branch its run's previous step left, if it has it and has no memory
        (whose compaction may have just changed the branch), or reads it.
        """
        if self.branch_from is not None:
            self.active = self.store.get_history(self.session_id, self.branch_from)
        elif measured is not None:
            self.active = measured
        elif self.active is None or self.memory is not None:
            self.active = self.store.get_history(self.session_id)
        return self.active + self._drained_messages()

    def _drained_messages(self) -> list[Message]:
        return [tool_message(o.call, o.result) for o in self.drained]
