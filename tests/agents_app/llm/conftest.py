"""Fixtures for the LLM adapter suites."""

import pytest

from tests.agents_app.llm.chat_server import ChatServer


@pytest.fixture
def chat_server():
    """A chat-completions server on a free local port, stopped afterwards."""
    server = ChatServer()
    server.start()
    yield server
    server.stop()
