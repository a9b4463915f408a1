from django.urls import path

from agents_app.api import chat, records, runs, sessions, tool_results

SESSION = "sessions/<session_id:session_id>/"
CHAT = "chat/<session_id:session_id>/"

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
