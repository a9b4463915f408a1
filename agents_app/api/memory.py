"""`/api/sessions/{id}/...`: a session's conversation memory (reference 002).

The message tree (`conversation`: the active branch, appends, branches, single messages),
compactions, context blocks, the frozen system prompt and forks. The message tree lives under
`conversation`, since `history` is the stream's chunk history (reference 001).
"""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import StrictCharField, StrictRegexField
from agents_app.api.memory_wire import (
    LABEL_PATTERN,
    MAX_BLOCK_TOKENS,
    ClosedObject,
    CompactionOutput,
    ContextBlockOutput,
    MessageInput,
    MessageListOutput,
    MessageOutput,
    StrictIntegerField,
    message_from_wire,
    messages_from_wire,
)
from agents_app.api.sessions import SessionOutput
from agents_app.memory import services
from sessions_app.http import query_input
from sessions_app.openapi import ErrorSerializer
from sessions_app.rest import HelixAPIView
from sessions_app.stores.rules import MAX_IDENTIFIER_LENGTH, MAX_PAGE_SIZE

LABEL = OpenApiParameter(
    "label", str, OpenApiParameter.PATH, pattern=LABEL_PATTERN, description="A block label."
)
TOO_LARGE = OpenApiResponse(
    ErrorSerializer,
    description="The content would take the block past its maxTokens; nothing was written.",
)
NOT_SEARCHABLE = OpenApiResponse(ErrorSerializer, description="The block is not searchable.")
COMPACTION_FAILED = OpenApiResponse(
    ErrorSerializer, description="The model failed to summarise; nothing was stored."
)


class AppendOutput(serializers.Serializer):
    messages = MessageOutput(many=True, source="appended", help_text="The messages stored.")
    compaction = CompactionOutput(allow_null=True, help_text="What compaction after it added.")
    compactionError = serializers.CharField(
        source="compaction_error", allow_null=True, help_text="Why that compaction failed."
    )


class ConversationOutput(serializers.Serializer):
    messages = MessageOutput(many=True)
    leafId = serializers.CharField(source="leaf_id", allow_null=True)
    pathLength = serializers.IntegerField(source="path_length")


class DeletedOutput(serializers.Serializer):
    deleted = serializers.IntegerField()


class ConversationView(HelixAPIView):
    """`GET ?leafId`: a branch, compactions applied; `POST`: append messages."""

    class HistoryInput(serializers.Serializer):
        leafId = StrictCharField(
            required=False,
            max_length=MAX_IDENTIFIER_LENGTH,
            help_text="The message the branch ends at; default: the one appended last.",
        )

    class AppendInput(ClosedObject):
        """Messages to append, each answering the one before."""

        messages = serializers.ListField(
            child=MessageInput(), min_length=1, max_length=MAX_PAGE_SIZE
        )
        parentId = StrictCharField(
            required=False,
            allow_null=True,
            max_length=MAX_IDENTIFIER_LENGTH,
            help_text="The first message's parent, unless it names its own: absent, the "
            "active branch's end; null, a new root; an id, a branch from that message, which "
            "becomes the active branch.",
        )

    @extend_schema(
        operation_id="sessions_conversation_retrieve",
        parameters=[HistoryInput],
        responses=ConversationOutput,
    )
    def get(self, request: Request, session_id: str) -> Response:
        query = self.HistoryInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        history = services.memory_history(
            user=request.user, session_id=session_id, leaf_id=query.validated_data.get("leafId")
        )
        return Response(ConversationOutput(history).data)

    @extend_schema(
        operation_id="sessions_conversation_append",
        request=AppendInput,
        responses={201: AppendOutput},
    )
    def post(self, request: Request, session_id: str) -> Response:
        body = self.AppendInput(data=request.data)
        body.is_valid(raise_exception=True)
        messages = messages_from_wire(body.validated_data)
        outcome = services.memory_append(
            user=request.user, session_id=session_id, messages=messages
        )
        return Response(AppendOutput(outcome).data, status=status.HTTP_201_CREATED)


class MessageView(HelixAPIView):
    """`GET`, `PUT` (update, or append when the session has no such message) or `DELETE`
    one message."""

    class MessagePutInput(MessageInput):
        """The message; the path names it, so a body `id`, if any, must be the path's."""

        id = None

        def to_internal_value(self, data: Any) -> Any:
            if isinstance(data, dict) and "id" in data:
                if data["id"] != self.context["message_id"]:
                    raise serializers.ValidationError(
                        {"id": ["This must be the message id of the path, or absent."]}
                    )
                data = {name: value for name, value in data.items() if name != "id"}
            return super().to_internal_value(data)

    @extend_schema(operation_id="sessions_conversation_message", responses=MessageOutput)
    def get(self, request: Request, session_id: str, message_id: str) -> Response:
        message = services.memory_message(
            user=request.user, session_id=session_id, message_id=message_id
        )
        return Response(MessageOutput(message).data)

    @extend_schema(
        operation_id="sessions_conversation_upsert",
        request=MessagePutInput,
        responses={200: MessageOutput, 201: MessageOutput},
        description="Update the stored message (its place in the tree stays), or append it "
        "(201) if the session has none of this id; `parentId` counts only then.",
    )
    def put(self, request: Request, session_id: str, message_id: str) -> Response:
        body = self.MessagePutInput(data=request.data, context={"message_id": message_id})
        body.is_valid(raise_exception=True)
        message = message_from_wire({**body.validated_data, "id": message_id})
        stored, created = services.memory_upsert(
            user=request.user, session_id=session_id, message=message
        )
        answer = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(MessageOutput(stored).data, status=answer)

    @extend_schema(operation_id="sessions_conversation_message_delete", responses={204: None})
    def delete(self, request: Request, session_id: str, message_id: str) -> Response:
        services.memory_message_delete(
            user=request.user, session_id=session_id, message_id=message_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class BranchesView(HelixAPIView):
    """`GET`: the messages answering one message, one per branch, oldest first."""

    @extend_schema(operation_id="sessions_conversation_branches", responses=MessageListOutput)
    def get(self, request: Request, session_id: str, message_id: str) -> Response:
        messages = services.memory_branches(
            user=request.user, session_id=session_id, message_id=message_id
        )
        return Response(MessageListOutput({"messages": messages}).data)


class ConversationDeleteView(HelixAPIView):
    """`POST {messageIds}`: delete those messages; their answers become roots."""

    class MessageIdsInput(ClosedObject):
        """The messages to delete."""

        messageIds = serializers.ListField(
            child=StrictCharField(max_length=MAX_IDENTIFIER_LENGTH),
            min_length=1,
            max_length=MAX_PAGE_SIZE,
            help_text="Ids the session does not hold are ignored.",
        )

    @extend_schema(
        operation_id="sessions_conversation_delete",
        request=MessageIdsInput,
        responses=DeletedOutput,
    )
    def post(self, request: Request, session_id: str) -> Response:
        body = self.MessageIdsInput(data=request.data)
        body.is_valid(raise_exception=True)
        deleted = services.memory_delete(
            user=request.user,
            session_id=session_id,
            message_ids=body.validated_data["messageIds"],
        )
        return Response(DeletedOutput({"deleted": deleted}).data)


class ConversationClearView(HelixAPIView):
    """`POST`: delete every message and compaction, forget loaded skills, refresh the prompt."""

    @extend_schema(
        operation_id="sessions_conversation_clear", request=None, responses=DeletedOutput
    )
    def post(self, request: Request, session_id: str) -> Response:
        deleted = services.memory_clear(user=request.user, session_id=session_id)
        return Response(DeletedOutput({"deleted": deleted}).data)


class CompactionListOutput(serializers.Serializer):
    compactions = CompactionOutput(many=True)


class CompactionsView(HelixAPIView):
    """`GET`: the compaction overlays in the order they were added; `POST`: add one."""

    class CompactionInput(ClosedObject):
        """A summary to show in place of a range of messages."""

        summary = StrictCharField()
        fromMessageId = StrictCharField(max_length=MAX_IDENTIFIER_LENGTH)
        toMessageId = StrictCharField(max_length=MAX_IDENTIFIER_LENGTH)

    @extend_schema(responses=CompactionListOutput)
    def get(self, request: Request, session_id: str) -> Response:
        compactions = services.memory_compactions(user=request.user, session_id=session_id)
        return Response(CompactionListOutput({"compactions": compactions}).data)

    @extend_schema(request=CompactionInput, responses={201: CompactionOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.CompactionInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        compaction = services.memory_compaction_add(
            user=request.user,
            session_id=session_id,
            summary=data["summary"],
            from_message_id=data["fromMessageId"],
            to_message_id=data["toMessageId"],
        )
        return Response(CompactionOutput(compaction).data, status=status.HTTP_201_CREATED)


class CompactOutput(serializers.Serializer):
    compaction = CompactionOutput(allow_null=True, help_text="Null: the branch is too short.")


class CompactView(HelixAPIView):
    """`POST {leafId?}`: compact the branch now with the agent's compactor (409 if none)."""

    class CompactInput(ClosedObject):
        """Which branch to compact."""

        leafId = StrictCharField(
            required=False,
            max_length=MAX_IDENTIFIER_LENGTH,
            help_text="The branch's end; default: the active branch.",
        )

    @extend_schema(request=CompactInput, responses={200: CompactOutput, 502: COMPACTION_FAILED})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.CompactInput(data=request.data)
        body.is_valid(raise_exception=True)
        compaction = services.memory_compact(
            user=request.user, session_id=session_id, leaf_id=body.validated_data.get("leafId")
        )
        return Response(CompactOutput({"compaction": compaction}).data)


class ContextBlockListOutput(serializers.Serializer):
    blocks = ContextBlockOutput(many=True)


class BlockContentInput(ClosedObject):
    """The content to write."""

    content = StrictCharField(allow_blank=True)


class ContextView(HelixAPIView):
    """`GET`: the context blocks, configured ones first; `POST`: add a block at run time.

    An added block is stored in the database and joins the system prompt when it is refreshed.
    """

    class BlockInput(ClosedObject):
        """A block to add, stored in the database."""

        label = StrictRegexField(LABEL_PATTERN, help_text="Letters, digits, '.', '_', '-'.")
        description = StrictCharField(required=False, allow_blank=True, default="")
        maxTokens = StrictIntegerField(
            required=False, allow_null=True, min_value=1, max_value=MAX_BLOCK_TOKENS
        )

    @extend_schema(operation_id="sessions_context_list", responses=ContextBlockListOutput)
    def get(self, request: Request, session_id: str) -> Response:
        blocks = services.context_blocks(user=request.user, session_id=session_id)
        return Response(ContextBlockListOutput({"blocks": [b.to_wire() for b in blocks]}).data)

    @extend_schema(
        operation_id="sessions_context_add", request=BlockInput, responses={201: ContextBlockOutput}
    )
    def post(self, request: Request, session_id: str) -> Response:
        body = self.BlockInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        block = services.context_block_add(
            user=request.user,
            session_id=session_id,
            label=data["label"],
            description=data["description"],
            max_tokens=data.get("maxTokens"),
        )
        return Response(ContextBlockOutput(block.to_wire()).data, status=status.HTTP_201_CREATED)


class ContextBlockView(HelixAPIView):
    """`GET` one block, `PUT {content}` to replace a writable block's content, or `DELETE` a
    block added at run time (a configured one answers 409)."""

    @extend_schema(
        operation_id="sessions_context_block", parameters=[LABEL], responses=ContextBlockOutput
    )
    def get(self, request: Request, session_id: str, label: str) -> Response:
        block = services.context_block(user=request.user, session_id=session_id, label=label)
        return Response(ContextBlockOutput(block.to_wire()).data)

    @extend_schema(
        parameters=[LABEL],
        request=BlockContentInput,
        responses={200: ContextBlockOutput, 422: TOO_LARGE},
    )
    def put(self, request: Request, session_id: str, label: str) -> Response:
        body = BlockContentInput(data=request.data)
        body.is_valid(raise_exception=True)
        block = services.context_block_replace(
            user=request.user,
            session_id=session_id,
            label=label,
            content=body.validated_data["content"],
        )
        return Response(ContextBlockOutput(block.to_wire()).data)

    @extend_schema(parameters=[LABEL], responses={204: None})
    def delete(self, request: Request, session_id: str, label: str) -> Response:
        services.context_block_remove(user=request.user, session_id=session_id, label=label)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ContextAppendView(HelixAPIView):
    """`POST {content}`: add content to the end of a writable block, on a new line."""

    @extend_schema(
        parameters=[LABEL],
        request=BlockContentInput,
        responses={200: ContextBlockOutput, 422: TOO_LARGE},
    )
    def post(self, request: Request, session_id: str, label: str) -> Response:
        body = BlockContentInput(data=request.data)
        body.is_valid(raise_exception=True)
        block = services.context_block_append(
            user=request.user,
            session_id=session_id,
            label=label,
            content=body.validated_data["content"],
        )
        return Response(ContextBlockOutput(block.to_wire()).data)


class EntryOutput(serializers.Serializer):
    key = serializers.CharField()


class ContextEntriesView(HelixAPIView):
    """`POST {content, title?, description?}`: write an entry of a skill or search block.

    The key is the slug of `title`, else of `content` with a hash of it, so the same title
    replaces its entry.
    """

    class ContextEntryInput(ClosedObject):
        """An entry of a skill or search block."""

        content = StrictCharField()
        title = StrictCharField(required=False)
        description = StrictCharField(required=False, help_text="A skill's; default: the title.")

    @extend_schema(parameters=[LABEL], request=ContextEntryInput, responses=EntryOutput)
    def post(self, request: Request, session_id: str, label: str) -> Response:
        body = self.ContextEntryInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        key = services.context_entry_set(
            user=request.user,
            session_id=session_id,
            label=label,
            content=data["content"],
            title=data.get("title"),
            description=data.get("description"),
        )
        return Response(EntryOutput({"key": key}).data)


class SearchResultsOutput(serializers.Serializer):
    results = serializers.CharField(
        allow_null=True, help_text="The best entries as `[key]` and content; null if none."
    )


class ContextSearchView(HelixAPIView):
    """`GET ?q`: search a searchable block's entries."""

    class SearchInput(serializers.Serializer):
        q = StrictCharField(max_length=1000, help_text="Words to look for.")

    @extend_schema(
        parameters=[LABEL, SearchInput],
        responses={200: SearchResultsOutput, 409: NOT_SEARCHABLE},
    )
    def get(self, request: Request, session_id: str, label: str) -> Response:
        query = self.SearchInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        results = services.context_block_search(
            user=request.user, session_id=session_id, label=label, query=query.validated_data["q"]
        )
        return Response(SearchResultsOutput({"results": results}).data)


class PromptOutput(serializers.Serializer):
    prompt = serializers.CharField(allow_blank=True)


class SystemPromptView(HelixAPIView):
    """`GET`: the frozen system prompt of the context blocks, rendered and stored the first
    time; block writes reach it only through `system-prompt/refresh`."""

    @extend_schema(responses=PromptOutput)
    def get(self, request: Request, session_id: str) -> Response:
        prompt = services.system_prompt_freeze(user=request.user, session_id=session_id)
        return Response(PromptOutput({"prompt": prompt}).data)


class SystemPromptRefreshView(HelixAPIView):
    """`POST`: render the system prompt from the blocks as they are now, and store it."""

    @extend_schema(request=None, responses=PromptOutput)
    def post(self, request: Request, session_id: str) -> Response:
        prompt = services.system_prompt_refresh(user=request.user, session_id=session_id)
        return Response(PromptOutput({"prompt": prompt}).data)


class ForkView(HelixAPIView):
    """`POST {atMessageId, name?}`: a new session holding the branch up to that message.

    The copies have fresh ids; compactions are applied first, so a summary is copied as the
    message it shows as. The new session's `parentSessionId` is this one.
    """

    class ForkInput(ClosedObject):
        """Where to fork, and the new session's name."""

        atMessageId = StrictCharField(max_length=MAX_IDENTIFIER_LENGTH)
        name = StrictCharField(required=False, allow_blank=True, default="", max_length=255)

    @extend_schema(request=ForkInput, responses={201: SessionOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.ForkInput(data=request.data)
        body.is_valid(raise_exception=True)
        state = services.session_fork(
            user=request.user,
            session_id=session_id,
            at_message_id=body.validated_data["atMessageId"],
            name=body.validated_data["name"],
        )
        return Response(SessionOutput(state).data, status=status.HTTP_201_CREATED)
