from django.urls import path, register_converter

from agents_app.api import chat, mcp_servers, memory, records, runs, sessions, tool_results
from sessions_app.converters import SessionIdConverter

SESSION = "sessions/<session_id:session_id>/"
CHAT = "chat/<session_id:session_id>/"
# The message tree; `history` is the stream's chunk history (`streams_app.urls`).
CONVERSATION = SESSION + "conversation"
MESSAGE = CONVERSATION + "/<message_id:message_id>"
BLOCK = SESSION + "context/<str:label>"

# A message id is an identifier as a session id is.
register_converter(SessionIdConverter, "message_id")

urlpatterns = [
    path("sessions/", sessions.SessionListView.as_view(), name="session-list"),
    path(SESSION, sessions.SessionDetailView.as_view(), name="session-detail"),
    path(SESSION + "start", runs.StartView.as_view(), name="session-start"),
    path(SESSION + "resume", runs.ResumeView.as_view(), name="session-resume"),
    path(SESSION + "retry", runs.RetryView.as_view(), name="session-retry"),
    path(SESSION + "interrupt", runs.InterruptView.as_view(), name="session-interrupt"),
    path(SESSION + "abort", runs.AbortView.as_view(), name="session-abort"),
    path(SESSION + "status", runs.StatusView.as_view(), name="session-status"),
    path(SESSION + "messages", records.MessagesView.as_view(), name="session-messages"),
    path(SESSION + "usage", records.UsageView.as_view(), name="session-usage"),
    path(SESSION + "runs", records.RunsView.as_view(), name="session-runs"),
    path(SESSION + "checkpoints", records.CheckpointsView.as_view(), name="session-checkpoints"),
    path(SESSION + "snapshot", records.SnapshotView.as_view(), name="session-snapshot"),
    path(SESSION + "search", records.SessionSearchView.as_view(), name="session-search"),
    path(CONVERSATION, memory.ConversationView.as_view(), name="session-conversation"),
    # Before the message routes, which would take `delete` and `clear` for message ids.
    path(
        CONVERSATION + "/delete",
        memory.ConversationDeleteView.as_view(),
        name="session-conversation-delete",
    ),
    path(
        CONVERSATION + "/clear",
        memory.ConversationClearView.as_view(),
        name="session-conversation-clear",
    ),
    path(MESSAGE, memory.MessageView.as_view(), name="session-message"),
    path(MESSAGE + "/branches", memory.BranchesView.as_view(), name="session-message-branches"),
    path(SESSION + "compactions", memory.CompactionsView.as_view(), name="session-compactions"),
    path(SESSION + "compact", memory.CompactView.as_view(), name="session-compact"),
    path(SESSION + "context", memory.ContextView.as_view(), name="session-context"),
    path(BLOCK, memory.ContextBlockView.as_view(), name="session-context-block"),
    path(BLOCK + "/append", memory.ContextAppendView.as_view(), name="session-context-append"),
    path(BLOCK + "/entries", memory.ContextEntriesView.as_view(), name="session-context-entries"),
    path(BLOCK + "/search", memory.ContextSearchView.as_view(), name="session-context-search"),
    path(SESSION + "system-prompt", memory.SystemPromptView.as_view(), name="session-prompt"),
    path(
        SESSION + "system-prompt/refresh",
        memory.SystemPromptRefreshView.as_view(),
        name="session-prompt-refresh",
    ),
    path(SESSION + "fork", memory.ForkView.as_view(), name="session-fork"),
    path(
        SESSION + "mcp-servers", mcp_servers.McpServerListView.as_view(), name="session-mcp-servers"
    ),
    path(
        SESSION + "mcp-servers/<str:name>",
        mcp_servers.McpServerDetailView.as_view(),
        name="session-mcp-server",
    ),
    path("search", records.SearchView.as_view(), name="search"),
    path("chat", chat.ChatView.as_view(), name="chat"),
    path(CHAT + "stream", chat.ChatStreamView.as_view(), name="chat-stream"),
    path(
        CHAT + "submit-tool-result",
        tool_results.SubmitToolResultView.as_view(),
        name="chat-submit-tool-result",
    ),
    path(CHAT + "interrupt", chat.ChatInterruptView.as_view(), name="chat-interrupt"),
    path(CHAT + "abort", runs.AbortView.as_view(), name="chat-abort"),
]
