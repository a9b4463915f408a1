"""A real local HTTP server that speaks OpenAI's streaming chat completions, for adapter tests.

Each request takes the next reply queued with `ChatServer.reply`; the server records every
request (path, headers, JSON body, the client's port) and notices when a client hangs up
mid-stream. It speaks HTTP/1.1 as model servers do: a stream's body goes in chunks, and a
connection serves one request after another until the client closes it.
"""

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Stream:
    """Answer 200 with these chunks as server-sent events, `delay` seconds apart; a string is
    sent as it is (comments, other fields, data over several lines)."""

    chunks: list[dict[str, Any] | str]
    delay: float = 0.0
    head_delay: float = 0.0
    done: bool = True


@dataclass
class Status:
    """Answer `status` with a JSON error body."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    port: int  # The client's: one connection's requests share it.


class ChatServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: list[Stream | Status] = []
        self.hung_up = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def reply(self, *replies: Stream | Status) -> None:
        with self._lock:
            self.replies.extend(replies)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def next_reply(self) -> Stream | Status:
        with self._lock:
            return self.replies.pop(0)


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            headers = {name.lower(): value for name, value in self.headers.items()}
            port = self.client_address[1]
            server.requests.append(Recorded(self.path, headers, body, port))
            reply = server.next_reply()
            if isinstance(reply, Status):
                self._status(reply)
            else:
                self._stream(reply)

        def _status(self, reply: Status) -> None:
            payload = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, reply: Stream) -> None:
            time.sleep(reply.head_delay)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in reply.chunks:
                    event = chunk if isinstance(chunk, str) else f"data: {json.dumps(chunk)}\n\n"
                    self._send_chunk(event.encode())
                    self._pause(reply.delay)
                if reply.done:
                    self._send_chunk(b"data: [DONE]\n\n")
                self._send_chunk(b"")  # The body's end.
            except (BrokenPipeError, ConnectionResetError):
                server.hung_up.set()
                self.close_connection = True

        def _send_chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _pause(self, seconds: float) -> None:
            """Wait `seconds`, or raise as soon as the client hangs up."""
            if seconds <= 0:
                return
            readable, _, _ = select.select([self.connection], [], [], seconds)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                raise ConnectionResetError("The client hung up.")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "served-model",
) -> dict[str, Any]:
    """Return one `chat.completion.chunk`; with `usage` alone, the final usage chunk."""
    choices = []
    if delta is not None or finish is not None:
        choices = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": choices,
        **({"usage": usage} if usage is not None else {}),
    }


def text_reply(*pieces: str, delay: float = 0.0) -> Stream:
    """Return a reply streaming `pieces` of text, then `stop` and usage."""
    return Stream(
        [
            chunk({"role": "assistant", "content": ""}),
            *(chunk({"content": piece}) for piece in pieces),
            chunk(finish="stop"),
            chunk(usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}),
        ],
        delay=delay,
    )
