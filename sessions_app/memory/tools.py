"""The context tools a model is given for a session's blocks (reference 002 `tools()`).

Which tools there are follows the blocks' kinds: `set_context` when a block is writable,
`load_context` and `unload_context` when one is a skill block, `search_context` when one is
searchable. Names, descriptions, input schemas and replies are the reference's; a failure is
replied as `Error: ...`, not raised. The runtime wraps each `MemoryTool` in a tool of its own.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, SkipJsonSchema
from pydantic_core import CoreSchema

from sessions_app.errors import HelixError
from sessions_app.memory.context import ContextBlock, SessionContext
from sessions_app.memory.prompt import usage_percent

# Accepts None, which the schema leaves out, as the reference's schemas do.
NoneOmitted = SkipJsonSchema[None]


@dataclass(frozen=True)
class MemoryTool:
    """A context tool: `execute` takes a validated `input_model` and returns the reply."""

    name: str
    description: str
    input_model: type[BaseModel]
    execute: Callable[[BaseModel], str]


class _ReferenceSchema(GenerateJsonSchema):
    """Write schemas as the reference does: objects inline, enums, no titles, no null defaults."""

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> dict[str, Any]:
        result = super().generate(schema, mode)
        definitions = result.pop("$defs", {})
        return _plain(result, definitions)


def _plain(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        node = {**definitions[node["$ref"].rsplit("/", 1)[-1]], **node}
    plain = {
        key: value
        for key, value in node.items()
        if key not in ("$ref", "title") and not (key == "default" and value is None)
    }
    if "const" in plain:  # A one-label Literal; the reference lists it as an enum.
        plain["enum"] = [plain.pop("const")]
    if "properties" in plain:
        plain["properties"] = {
            name: _plain(value, definitions) for name, value in plain["properties"].items()
        }
    return plain


class ToolInput(BaseModel):
    """The input of a context tool, whose JSON schema is the reference's."""

    @classmethod
    def model_json_schema(
        cls,
        *args: Any,
        schema_generator: type[GenerateJsonSchema] = _ReferenceSchema,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return super().model_json_schema(*args, schema_generator=schema_generator, **kwargs)


def context_tools(context: SessionContext) -> list[MemoryTool]:
    """Return the context tools for the blocks `context` has now."""
    blocks = context.get_blocks()
    tools = []
    if writable := [block for block in blocks if block.writable]:
        tools.append(_set_context(context, writable))
    if skill_labels := [block.label for block in blocks if block.is_skill]:
        tools += [_load_context(context, skill_labels), _unload_context(context, skill_labels)]
    if search_labels := [block.label for block in blocks if block.is_searchable]:
        tools.append(_search_context(context, search_labels))
    return tools


def _set_context(context: SessionContext, writable: list[ContextBlock]) -> MemoryTool:
    lines = []
    for block in writable:
        kind = (
            "skill collection, keyed entries"
            if block.is_skill
            else "searchable, keyed entries"
            if block.is_searchable
            else "writable"
        )
        lines.append(f'- "{block.label}" ({kind}): {block.description or "no description"}')
    keyed = [block.label for block in writable if block.is_skill or block.is_searchable]
    fields: dict[str, Any] = {
        "label": (
            Literal[tuple(block.label for block in writable)],
            Field(description="Block label to write to"),
        ),
        "content": (str, Field(description="The main content to write to the block.")),
        "action": (
            Literal["replace", "append"] | NoneOmitted,
            Field(None, description="replace (default) or append"),
        ),
    }
    hint = ""
    if keyed:
        fields["metadata"] = (
            _metadata_model() | NoneOmitted,
            Field(
                None,
                description=(
                    "Optional metadata for keyed entries (skill collections, searchable blocks: "
                    + ", ".join(f'"{label}"' for label in keyed)
                    + "). Short content doesn't need metadata; longer loadable entries (skills) "
                    "benefit from a title and description so the model can pick the right one "
                    "without loading it."
                ),
            ),
        )
        hint = (
            "\n\nFor keyed blocks (skill collections / searchable), pass "
            "`metadata: { title, description }` — title stabilises updates, "
            "description helps the model pick entries. Metadata is optional; "
            "short content rarely needs it, long loadable entries benefit most."
        )

    def execute(args: Any) -> str:
        try:
            block = context.get_block(args.label)
            if block is None:
                return f'Error: block "{args.label}" not found'
            if block.is_skill or block.is_searchable:
                metadata = getattr(args, "metadata", None)
                key = context.set_entry(
                    args.label,
                    args.content,
                    title=metadata.title if metadata else None,
                    description=metadata.description if metadata else None,
                )
                return f'Indexed "{key}" in {args.label}.'
            write = context.append_block if args.action == "append" else context.replace_block
            updated = write(args.label, args.content)
        except HelixError as error:
            return f"Error: {error.message}"
        if updated.max_tokens:
            percent = usage_percent(updated.tokens, updated.max_tokens)
            usage = f"{percent}% ({updated.tokens}/{updated.max_tokens} tokens)"
        else:
            usage = f"{updated.tokens} tokens"
        return f"Written to {args.label}. Usage: {usage}"

    return MemoryTool(
        name="set_context",
        description=(
            "Write to a context block. Available blocks:\n"
            + "\n".join(lines)
            + "\n\nWrites are durable and persist across sessions."
            + hint
        ),
        input_model=create_model("SetContextInput", __base__=ToolInput, **fields),
        execute=execute,
    )


def _metadata_model() -> type[BaseModel]:
    return create_model(
        "SetContextMetadata",
        __base__=ToolInput,
        title=(
            str | NoneOmitted,
            Field(
                None,
                description="Short title. Used as a stable identifier — entries with the "
                "same title are updated in place, different titles create new entries.",
            ),
        ),
        description=(
            str | NoneOmitted,
            Field(
                None,
                description="One-line summary shown alongside the title in the system prompt "
                "so the model can decide when to load the entry.",
            ),
        ),
    )


def _skill_input(name: str, labels: list[str], key_description: str) -> type[BaseModel]:
    return create_model(
        name,
        __base__=ToolInput,
        label=(Literal[tuple(labels)], Field(description="Skill block label")),
        key=(str, Field(description=key_description)),
    )


def _load_context(context: SessionContext, labels: list[str]) -> MemoryTool:
    def execute(args: Any) -> str:
        try:
            content = context.load_skill(args.label, args.key)
        except HelixError as error:
            return f"Error: {error.message}"
        return content if content is not None else f"Not found: {args.key}"

    return MemoryTool(
        name="load_context",
        description="Load a document from a skill block by key. Available skill blocks: "
        + ", ".join(f'"{label}"' for label in labels)
        + ". Check the system prompt for available keys.",
        input_model=_skill_input("LoadContextInput", labels, "Skill key to load"),
        execute=execute,
    )


def _unload_context(context: SessionContext, labels: list[str]) -> MemoryTool:
    loaded = context.loaded_skills()

    def execute(args: Any) -> str:
        if not context.unload_skill(args.label, args.key):
            return f'Skill "{args.key}" is not currently loaded in "{args.label}".'
        return f'Unloaded "{args.key}" from {args.label}. Context reclaimed.'

    return MemoryTool(
        name="unload_context",
        description="Unload a previously loaded skill to free context space. "
        "The skill remains available for re-loading."
        + (
            f" Currently loaded: {', '.join(loaded)}." if loaded else " No skills currently loaded."
        ),
        input_model=_skill_input("UnloadContextInput", labels, "Skill key to unload"),
        execute=execute,
    )


def _search_context(context: SessionContext, labels: list[str]) -> MemoryTool:
    def execute(args: Any) -> str:
        try:
            results = context.search(args.label, args.query)
        except HelixError as error:
            return f"Error: {error.message}"
        return results if results is not None else "No results found."

    return MemoryTool(
        name="search_context",
        description="Search for information in a searchable context block. "
        "ONLY these blocks are searchable: "
        + ", ".join(f'"{label}"' for label in labels)
        + ". Other blocks cannot be searched.",
        input_model=create_model(
            "SearchContextInput",
            __base__=ToolInput,
            label=(Literal[tuple(labels)], Field(description="Searchable block label")),
            query=(str, Field(description="Search query")),
        ),
        execute=execute,
    )
