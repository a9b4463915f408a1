from django.urls import path

from streams_app import api, views

urlpatterns = [
    path("sessions/<str:session_id>/stream", views.stream_events, name="session-stream"),
    path("sessions/<str:session_id>/history", api.HistoryView.as_view(), name="session-history"),
]
