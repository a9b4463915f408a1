"""`/chat/`: the chat page (`agents_app.chat.page`)."""

from django.urls import path

from agents_app.chat.page import chat_page

urlpatterns = [
    path("<str:agent_type>/", chat_page, name="chat-page"),
    path("<str:agent_type>/<session_id:session_id>/", chat_page, name="chat-page-session"),
]
