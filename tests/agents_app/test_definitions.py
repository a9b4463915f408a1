"""Agent and tool definitions: schemas, validation, sync and async tools, the output tool."""

import asyncio

import pytest
from pydantic import BaseModel, Field

from agents_app.definitions import (
    OUTPUT_TOOL_NAME,
    Agent,
    InvalidDefinition,
    Tool,
    ToolInputInvalid,
)


class Query(BaseModel):
    query: str = Field(min_length=2, description="What to find.")
    limit: int = 3


class Answer(BaseModel):
    summary: str


def find(query: Query, ctx) -> dict:
    return {"found": query.query, "limit": query.limit}


async def find_later(query: Query, ctx) -> Answer:
    await asyncio.sleep(0)
    return Answer(summary=query.query.upper())


def test_a_tool_sends_its_input_models_json_schema():
    schema = Tool(name="find", description="Find.", input_model=Query, execute=find).json_schema()

    assert schema["properties"]["query"] == {
        "description": "What to find.",
        "minLength": 2,
        "title": "Query",
        "type": "string",
    }
    assert schema["required"] == ["query"]


def test_a_tool_validates_its_arguments_and_names_the_problems():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)

    assert tool.run({"query": "django"}, ctx=None) == {"found": "django", "limit": 3}
    with pytest.raises(ToolInputInvalid) as caught:
        tool.run({"query": "x", "limit": "many"}, ctx=None)
    locations = {problem["location"] for problem in caught.value.details["problems"]}
    assert locations == {"query", "limit"}


def test_async_tools_run_to_completion_and_models_come_back_as_json():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find_later)

    assert tool.run({"query": "celery"}, ctx=None) == {"summary": "CELERY"}


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.allowed"])
def test_names_follow_the_function_name_rule(name):
    with pytest.raises(InvalidDefinition):
        Tool(name=name, description="", input_model=Query, execute=find)
    with pytest.raises(InvalidDefinition):
        Agent(name=name)


def test_an_agent_refuses_tools_named_alike_and_a_step_limit_below_one():
    tool = Tool(name="find", description="Find.", input_model=Query, execute=find)
    with pytest.raises(InvalidDefinition, match="find"):
        Agent(name="dup", tools=[tool, tool])
    with pytest.raises(InvalidDefinition, match="max_steps"):
        Agent(name="none", max_steps=0)


def test_an_output_schema_adds_the_output_tool_that_validates_the_output():
    agent = Agent(name="answers", output_schema=Answer)

    assert [tool.name for tool in agent.all_tools()] == [OUTPUT_TOOL_NAME]
    assert agent.all_tools()[0].json_schema()["required"] == ["summary"]
    assert agent.parse_output({"summary": "yes"}) == {"summary": "yes"}
    with pytest.raises(ToolInputInvalid):
        agent.parse_output({"answer": "no"})
    assert Agent(name="free").all_tools() == []


def test_the_system_prompt_is_text_or_a_function_of_the_state():
    assert Agent(name="fixed", system_prompt="Be brief.").render_system_prompt({}) == "Be brief."
    counting = Agent(name="counting", system_prompt=lambda state: f"At {state['n']}.")
    assert counting.render_system_prompt({"n": 4}) == "At 4."


def test_each_session_gets_a_fresh_initial_state():
    agent = Agent(name="fresh", initial_state={"items": []})
    first = agent.make_initial_state()
    first["items"].append(1)

    assert agent.make_initial_state() == {"items": []}
    assert Agent(name="made", initial_state=lambda: {"n": 1}).make_initial_state() == {"n": 1}
