"""Agent and tool definitions: schemas, validation, sync and async tools, the output tool, and
the lifecycle hook pieces."""

import asyncio
import dataclasses
import datetime
import math
import threading

import pytest
from asgiref.sync import sync_to_async
from pydantic import BaseModel, Field, ValidationError

from agents_app.definitions.agent import (
    OUTPUT_TOOL_NAME,
    Agent,
    InvalidDefinition,
    Tool,
    ToolInputInvalid,
    ToolResultInvalid,
    sub_agent_tool,
)
from agents_app.definitions.hooks import (
    AbortResult,
    AfterStartContext,
    AgentHooks,
    BeforeContext,
    BeforeStartContext,
    CompleteContext,
    StartAgentRequest,
    call_before_hook,
    call_hook,
)


class Query(BaseModel):
    query: str = Field(min_length=2, description="What to find.")
    limit: int = 3


class Place(BaseModel):
    city: str


class Trip(BaseModel):
    stops: list[Place]


class Answer(BaseModel):
    summary: str


def find(query: Query, ctx) -> dict:
    return {"found": query.query, "limit": query.limit}


async def find_later(query: Query, ctx) -> Answer:
    await asyncio.sleep(0)
    return Answer(summary=query.query.upper())


def tool_returning(value, **options) -> Tool:
    return Tool(
        name="returns", description="", input_model=Query, execute=lambda q, c: value, **options
    )


# Tools


def test_a_tool_sends_its_input_models_json_schema():
    schema = Tool(name="find", description="Find.", input_model=Query, execute=find).json_schema()

    assert schema == Query.model_json_schema()
    assert schema["properties"]["query"] == {
        "description": "What to find.",
        "minLength": 2,
        "title": "Query",
        "type": "string",
    }
    assert schema["required"] == ["query"]


def test_nested_input_models_come_with_their_definitions():
    tool = Tool(name="plan", description="Plan.", input_model=Trip, execute=lambda t, c: None)

    schema = tool.json_schema()

    assert schema["properties"]["stops"]["items"] == {"$ref": "#/$defs/Place"}
    assert schema["$defs"]["Place"]["required"] == ["city"]


def test_a_tool_validates_its_arguments_and_names_the_problems():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)

    assert tool.run({"query": "django"}, ctx=None) == {"found": "django", "limit": 3}
    with pytest.raises(ToolInputInvalid) as caught:
        tool.run({"query": "x", "limit": "many"}, ctx=None)

    error = caught.value
    locations = {problem["location"] for problem in error.details["problems"]}
    assert locations == {"query", "limit"}
    assert error.details["tool"] == "find"
    assert (error.code, error.http_status) == ("invalid-tool-input", 400)
    assert str(error).startswith("Invalid input for find: ")
    assert "query: String should have at least 2 characters" in str(error)


def test_arguments_that_are_not_an_object_are_invalid_input():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)

    with pytest.raises(ToolInputInvalid, match="input: "):
        tool.parse_input(["django"])
    assert tool.parse_input({"query": "django"}) == Query(query="django")


def test_the_tool_receives_the_validated_model_and_the_context():
    received = []
    context = object()
    tool = Tool(
        name="spy",
        description="",
        input_model=Query,
        execute=lambda query, ctx: received.append((query, ctx)),
    )

    assert tool.run({"query": "celery", "limit": "5"}, context) is None
    assert received == [(Query(query="celery", limit=5), context)]


def test_async_tools_run_to_completion_and_models_come_back_as_json():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find_later)

    assert tool.run({"query": "celery"}, ctx=None) == {"summary": "CELERY"}


def test_an_async_tools_sync_to_async_calls_run_in_the_thread_that_runs_the_tool():
    async def which_thread(query: Query, ctx) -> int:
        return await sync_to_async(threading.get_ident)()

    tool = Tool(name="thread", description="", input_model=Query, execute=which_thread)
    results = {}

    def run_in_worker(n: int) -> None:
        results[n] = (tool.run({"query": "where"}, ctx=None), threading.get_ident())

    workers = [threading.Thread(target=run_in_worker, args=(n,)) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert len(results) == 3
    assert all(ran_in == worker for ran_in, worker in results.values())


def test_what_a_tool_raises_reaches_the_caller():
    def broken(query: Query, ctx):
        raise RuntimeError("no network")

    async def broken_later(query: Query, ctx):
        raise RuntimeError("no network later")

    with pytest.raises(RuntimeError, match="no network"):
        Tool(name="b", description="", input_model=Query, execute=broken).run({"query": "q1"}, None)
    with pytest.raises(RuntimeError, match="no network later"):
        Tool(name="b", description="", input_model=Query, execute=broken_later).run(
            {"query": "q1"}, None
        )


def test_results_come_back_in_json_form():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    tool = tool_returning({"place": Place(city="Oslo"), "at": when, "pair": (1, 2)})

    assert tool.run({"query": "qq"}, None) == {
        "place": {"city": "Oslo"},
        "at": "2026-01-02T03:04:05Z",
        "pair": [1, 2],
    }


@pytest.mark.parametrize("result", [object(), {"ratio": math.nan}])
def test_a_result_without_a_json_form_is_refused(result):
    with pytest.raises(ToolResultInvalid, match=r"'returns'.*JSON"):
        tool_returning(result).run({"query": "qq"}, None)


def test_an_output_model_validates_and_dumps_the_result():
    assert tool_returning({"city": "Rome"}, output_model=Place).run({"query": "qq"}, None) == {
        "city": "Rome"
    }
    assert tool_returning(Place(city="Rome"), output_model=Place).run({"query": "qq"}, None) == {
        "city": "Rome"
    }
    with pytest.raises(ToolResultInvalid, match=r"'returns'.*city: Field required"):
        tool_returning({"town": "Rome"}, output_model=Place).run({"query": "qq"}, None)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.allowed", "trailing\n", 7])
def test_names_follow_the_function_name_rule(name):
    with pytest.raises(InvalidDefinition, match="letters, digits, underscores or hyphens"):
        Tool(name=name, description="", input_model=Query, execute=find)
    with pytest.raises(InvalidDefinition, match="letters, digits, underscores or hyphens"):
        Agent(name=name)


@pytest.mark.parametrize("name", ["a", "x" * 64, "snake_and-kebab-2"])
def test_names_within_the_rule_are_accepted(name):
    assert Tool(name=name, description="", input_model=Query, execute=find).name == name
    assert Agent(name=name).name == name


def test_a_tool_needs_a_pydantic_input_model_and_a_callable():
    with pytest.raises(InvalidDefinition, match="input_model must be a pydantic model"):
        Tool(name="t", description="", input_model=dict, execute=find)
    with pytest.raises(InvalidDefinition, match="input_model must be a pydantic model"):
        Tool(name="t", description="", input_model=Query(query="an instance"), execute=find)
    with pytest.raises(InvalidDefinition, match="output_model must be a pydantic model"):
        Tool(name="t", description="", input_model=Query, execute=find, output_model=dict)
    with pytest.raises(InvalidDefinition, match="execute must be callable"):
        Tool(name="t", description="", input_model=Query, execute="find")
    with pytest.raises(InvalidDefinition, match="execute must be callable"):
        Tool(name="t", description="", input_model=Query)  # Only a client tool has none.


def test_client_and_approval_tools_suspend_and_a_client_tool_runs_nowhere_here():
    client = Tool(name="ask", description="", input_model=Query, client=True)
    approval = Tool(
        name="pay", description="", input_model=Query, execute=find, needs_approval=True
    )

    assert (client.suspends, approval.suspends) == (True, True)
    assert Tool(name="t", description="", input_model=Query, execute=find).suspends is False
    with pytest.raises(InvalidDefinition, match="a client or sub-agent tool has no execute"):
        Tool(name="t", description="", input_model=Query, execute=find, client=True)
    with pytest.raises(InvalidDefinition, match="needs no approval"):
        Tool(name="t", description="", input_model=Query, client=True, needs_approval=True)
    with pytest.raises(InvalidDefinition, match="is not idempotent"):
        Tool(name="t", description="", input_model=Query, client=True, idempotent=True)


# Agents


def test_an_agent_refuses_tools_named_alike():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)
    other = Tool(name="other", description="", input_model=Query, execute=find)

    with pytest.raises(InvalidDefinition, match="several tools named find"):
        Agent(name="dup", tools=[tool, other, tool])


def test_the_output_tools_name_is_reserved():
    reserved = Tool(name=OUTPUT_TOOL_NAME, description="", input_model=Answer, execute=find)

    with pytest.raises(InvalidDefinition, match="reserved"):
        Agent(name="sneaky", tools=[reserved])
    with pytest.raises(InvalidDefinition, match="reserved"):
        Agent(name="sneaky", tools=[reserved], output_schema=Answer)


@pytest.mark.parametrize(
    ("definition", "problem"),
    [
        ({"max_steps": 0}, "max_steps must be at least 1"),
        ({"max_steps": True}, "max_steps must be an integer"),
        ({"tools": [find]}, "is not a Tool"),
        ({"output_schema": dict}, "output_schema must be a pydantic model"),
        ({"system_prompt": 42}, "system_prompt must be text or a function"),
        ({"initial_state": [1]}, "initial_state must be a dict or a function"),
        ({"initial_state": {"when": object()}}, "initial_state must be JSON-serializable"),
        ({"initial_state": {"note": "a\x00"}}, "initial_state holds a NUL character, which no"),
        ({"llm": "gpt"}, "llm must be a dict"),
        ({"hooks": {"on_complete": print}}, "hooks must be an AgentHooks"),
    ],
)
def test_an_agent_refuses_a_broken_definition_naming_the_problem(definition, problem):
    with pytest.raises(InvalidDefinition, match=problem):
        Agent(name="broken", **definition)


def test_an_initial_state_function_returning_a_nul_is_refused_naming_the_agent():
    """A session's first state held it: a database error on PostgreSQL, stored on SQLite."""
    agent = Agent(name="nul-maker", initial_state=lambda: {"notes": ["\x00"]})

    with pytest.raises(ValueError, match="'nul-maker': initial_state holds a NUL character"):
        agent.make_initial_state()


def test_an_agent_has_the_documented_defaults():
    agent = Agent(name="plain")

    assert agent.max_steps == 10
    assert agent.tools == []
    assert agent.output_schema is None
    assert agent.llm == {}
    assert agent.hooks is None
    assert agent.render_system_prompt({}) == ""
    assert agent.make_initial_state() is None  # No state until one is set (reference 004).
    assert agent.state_sync.callables == ()
    assert agent.memory is None


def test_an_agents_tool_list_is_its_own():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)
    tools = [tool]
    agent = Agent(name="owner", tools=tools)
    tools.append(Tool(name="late", description="", input_model=Query, execute=find))

    assert [t.name for t in agent.all_tools()] == ["find"]


def test_an_output_schema_adds_the_output_tool_that_validates_the_output():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)
    agent = Agent(name="answers", tools=[tool], output_schema=Answer)

    assert [t.name for t in agent.all_tools()] == ["find", OUTPUT_TOOL_NAME]
    assert agent.tools == [tool]
    assert agent.all_tools()[-1].json_schema() == Answer.model_json_schema()
    assert agent.parse_output({"summary": "yes"}) == {"summary": "yes"}
    with pytest.raises(ToolInputInvalid, match="summary: Field required"):
        agent.parse_output({"answer": "no"})
    assert Agent(name="free", tools=[tool]).all_tools() == [tool]


def test_the_output_tool_is_not_run_but_parsed_by_the_executor():
    agent = Agent(name="answers", output_schema=Answer)

    with pytest.raises(RuntimeError, match="parse_output"):
        agent.all_tools()[0].run({"summary": "yes"}, None)
    with pytest.raises(ValueError, match="no output schema"):
        Agent(name="free").parse_output({"summary": "yes"})


def test_an_agent_copied_with_other_hooks_keeps_its_output_tool():
    agent = Agent(name="answers", output_schema=Answer)
    hooked = dataclasses.replace(agent, hooks=AgentHooks(on_complete=print))

    assert [t.name for t in hooked.all_tools()] == [OUTPUT_TOOL_NAME]
    assert hooked.parse_output({"summary": "yes"}) == {"summary": "yes"}
    assert hooked.hooks.on_complete is print


def test_the_system_prompt_is_text_or_a_function_of_the_state():
    assert Agent(name="fixed", system_prompt="Be brief.").render_system_prompt({}) == "Be brief."
    counting = Agent(name="counting", system_prompt=lambda state: f"At {state.get('n', 0)}.")
    assert counting.render_system_prompt({"n": 4}) == "At 4."
    assert counting.render_system_prompt(None) == "At 0."


def test_a_system_prompt_function_cannot_change_the_state_and_must_return_text():
    def meddling(state: dict) -> str:
        state["items"].append("meddled")
        return "Fine."

    state = {"items": []}
    assert Agent(name="meddling", system_prompt=meddling).render_system_prompt(state) == "Fine."
    assert state == {"items": []}
    with pytest.raises(TypeError, match="system_prompt returned int"):
        Agent(name="numeric", system_prompt=lambda state: 42).render_system_prompt({})


def test_each_session_gets_a_fresh_initial_state():
    agent = Agent(name="fresh", initial_state={"items": [], "nested": {"seen": []}})
    first = agent.make_initial_state()
    first["items"].append(1)
    first["nested"]["seen"].append(1)

    assert agent.make_initial_state() == {"items": [], "nested": {"seen": []}}
    assert agent.initial_state == {"items": [], "nested": {"seen": []}}


def test_an_initial_state_function_is_called_for_each_session():
    calls = []

    def initial() -> dict:
        calls.append(1)
        return {"n": len(calls)}

    agent = Agent(name="made", initial_state=initial)

    assert agent.make_initial_state() == {"n": 1}
    assert agent.make_initial_state() == {"n": 2}
    with pytest.raises(TypeError, match="initial_state returned list"):
        Agent(name="listy", initial_state=lambda: []).make_initial_state()


# Lifecycle hooks


def test_hooks_must_be_callable():
    with pytest.raises(TypeError, match="before_start must be callable"):
        AgentHooks(before_start="refuse")
    assert AgentHooks().on_complete is None


def test_call_hook_runs_sync_and_async_hooks_and_no_hook_at_all():
    async def later(context):
        await asyncio.sleep(0)
        return ("async", context)

    assert call_hook(None, "context") is None
    assert call_hook(lambda context: ("sync", context), "c") == ("sync", "c")
    assert call_hook(later, "c") == ("async", "c")
    assert call_hook(lambda response, context: [response, context], 1, 2) == [1, 2]


def test_an_async_hooks_sync_to_async_calls_run_in_the_calling_thread():
    async def which_thread(context) -> int:
        return await sync_to_async(threading.get_ident)()

    result = {}
    worker = threading.Thread(target=lambda: result.update(ran=call_hook(which_thread, None)))
    worker.start()
    worker.join()

    assert result["ran"] == worker.ident


def test_a_before_hook_refuses_with_an_abort_result_and_nothing_else():
    context = BeforeStartContext(body={"agentType": "a"}, execution_state=None)
    refusal = AbortResult(401, {"error": "User ID required"})

    async def refuse(context):
        return refusal

    assert call_before_hook(refuse, context) is refusal
    assert call_before_hook(lambda context: None, context) is None
    assert call_before_hook(None, context) is None
    with pytest.raises(TypeError, match="None or an AbortResult, not dict"):
        call_before_hook(lambda context: {"abort": True}, context)


def test_an_abort_result_is_an_error_status_with_a_json_body():
    assert AbortResult(status=403) == AbortResult(403, {})
    for status in (200, 302, 600):
        with pytest.raises(ValueError, match="4xx or 5xx"):
            AbortResult(status)
    with pytest.raises(TypeError, match="int"):
        AbortResult("401")


def test_hook_contexts_carry_what_the_reference_gives_them():
    before = BeforeStartContext(body={"agentType": "a"}, execution_state="state")
    after = AfterStartContext(session_id="s", run_id="r", agent_type="a")
    done = CompleteContext(session_id="s", run_id="r", status="failed", error="boom")

    assert isinstance(before, BeforeContext)
    assert (before.body, before.execution_state, before.request) == (
        {"agentType": "a"},
        "state",
        None,
    )
    assert (after.session_id, after.run_id, after.agent_type) == ("s", "r", "a")
    assert (done.status, done.result, done.error) == ("failed", None, "boom")
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.status = "completed"


def test_a_start_request_reads_the_wire_body():
    request = StartAgentRequest.model_validate(
        {
            "agentType": "researcher",
            "input": {"message": [{"role": "user", "content": "Hi", "metadata": {"k": 1}}]},
            "sessionId": "s-1",
            "userId": "u-1",
            "tags": ["t"],
            "metadata": {"source": "web"},
        }
    )

    assert request.agent_type == "researcher"
    assert request.input.message[0].content == "Hi"
    assert (request.session_id, request.user_id) == ("s-1", "u-1")
    assert (
        StartAgentRequest.model_validate({"agentType": "a", "input": {"message": "Hi"}}).session_id
        is None
    )
    with pytest.raises(ValidationError):
        StartAgentRequest.model_validate({"agentType": "a", "input": {}})


def test_a_sub_agent_tool_names_its_agent_and_has_a_positive_timeout():
    tool = sub_agent_tool("analyst", Query)

    assert (tool.name, tool.sub_agent, tool.timeout_seconds) == ("analyst", "analyst", 600.0)
    assert tool.execute is None
    assert tool.suspends
    assert sub_agent_tool("analyst", Query, name="ask", timeout_seconds=5).name == "ask"
    with pytest.raises(InvalidDefinition, match="timeout_seconds must be positive"):
        sub_agent_tool("analyst", Query, timeout_seconds=0)
    with pytest.raises(InvalidDefinition, match="sub-agent tool has no execute"):
        Tool(name="t", description="", input_model=Query, execute=find, sub_agent="analyst")
