"""A session's memory as its agent configures it: in a step, and for the API outside runs."""

from collections.abc import Callable

from agents_app.definitions.agent import Tool, ToolContext
from agents_app.definitions.memory import AgentMemory
from agents_app.definitions.registry import AgentFactoryContext, get_registry, session_agent
from agents_app.llm.base import AdapterContext, LLMRequest, TextDelta, build_adapter
from sessions_app.memory.manager import SessionManager
from sessions_app.memory.session import ConversationMemory, MemoryConfig
from sessions_app.memory.tools import MemoryTool
from sessions_app.storable import storable
from sessions_app.stores.types import Message, MessageRole, SessionState


def session_memory(
    memory: AgentMemory, state: SessionState, adapter_context: AdapterContext, llm_config: dict
) -> ConversationMemory:
    """Return the memory of the session `state`, summarising through the agent's model."""
    config = memory.config(summarize=_summarizer(adapter_context, llm_config))
    return ConversationMemory(state.session_id, config)


def memory_of(state: SessionState) -> ConversationMemory:
    """Return the memory of the session `state` outside a run, as its agent configures it."""
    agent = session_agent(state)
    context = AdapterContext(session_id=state.session_id, agent_type=state.agent_type, run_id="")
    return session_memory(agent.memory or AgentMemory(), state, context, agent.llm)


def memory_manager(agent_type: str, owner_id: int | None) -> SessionManager:
    """Return the session manager of `owner_id`'s sessions of `agent_type`."""
    agent = get_registry().resolve(agent_type, AgentFactoryContext(session_id="", run_id=""))
    context = AdapterContext(session_id="", agent_type=agent_type, run_id="")
    memory = agent.memory or AgentMemory()
    return SessionManager(
        agent_type=agent_type,
        owner_id=owner_id,
        config=memory.config(summarize=_summarizer(context, agent.llm)),
    )


def memory_tools(
    memory: AgentMemory, session: ConversationMemory, state: SessionState
) -> list[Tool]:
    """Return the session's memory tools (and `session_search`, if asked) as runtime tools."""
    tools = session.tools()
    if memory.session_search:
        manager = SessionManager(
            agent_type=state.agent_type, owner_id=state.owner_id, config=MemoryConfig()
        )
        tools += manager.tools()
    return [_runtime_tool(tool) for tool in tools]


def _summarizer(adapter_context: AdapterContext, llm_config: dict) -> Callable[[str], str]:
    """Return a function asking the agent's model to answer a prompt, as one text (stored as
    every backend can store it)."""

    def summarize(prompt: str) -> str:
        request = LLMRequest(
            system="",
            messages=[Message(role=MessageRole.USER, content=prompt)],
            model=llm_config.get("model"),
        )
        stream = build_adapter(adapter_context, llm_config).stream(request)
        return storable("".join(event.text for event in stream if isinstance(event, TextDelta)))

    return summarize


def _runtime_tool(tool: MemoryTool) -> Tool:
    def execute(arguments, ctx: ToolContext) -> str:
        return tool.execute(arguments)

    return Tool(
        name=tool.name,
        description=tool.description,
        input_model=tool.input_model,
        execute=execute,
    )
