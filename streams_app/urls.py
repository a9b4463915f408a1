from django.urls import path

from streams_app import api, views

SESSION = "sessions/<session_id:session_id>/"

urlpatterns = [
    path(SESSION + "stream", views.stream_events, name="session-stream"),
    path(SESSION + "history", api.HistoryView.as_view(), name="session-history"),
]
