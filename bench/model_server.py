"""A model server for the model stream benchmark: `python -m bench.model_server EVENTS DELAY`.

It answers every `POST .../chat/completions` with the same streamed reply, as an
OpenAI-compatible server does: a role chunk, EVENTS content chunks `DELAY` seconds apart, the
finish and the usage, then `[DONE]`, each a server-sent event, in a chunked HTTP/1.1 body on a
connection kept for the client's next request. It prints its base URL, then serves until it is
stopped. Run in a process of its own, its CPU is not the client's.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The events of a reply beside its content chunks: the role chunk, the finish, the usage.
FRAMING_EVENTS = 3


def reply_events(events: int) -> list[bytes]:
    """Return the reply's server-sent events, each an HTTP chunk, `[DONE]` and the body's end
    last."""

    def chunk(**fields) -> dict:
        return {"id": "bench", "object": "chat.completion.chunk", "model": "bench", **fields}

    def choice(delta: dict, finish: str | None = None) -> list[dict]:
        return [{"index": 0, "delta": delta, "finish_reason": finish}]

    usage = {"prompt_tokens": 12, "completion_tokens": events, "total_tokens": 12 + events}
    chunks = [
        chunk(choices=choice({"role": "assistant", "content": ""})),
        *(chunk(choices=choice({"content": f"word{n} "})) for n in range(events)),
        chunk(choices=choice({}, "stop")),
        chunk(choices=[], usage=usage),
    ]
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
    return [b"%x\r\n%s\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]


def main() -> None:
    events, delay = int(sys.argv[1]), float(sys.argv[2])
    reply = reply_events(events)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in reply:
                    self.wfile.write(event)
                    self.wfile.flush()
                    time.sleep(delay)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # Every stream of a round connects at once.

        def handle_error(self, request, client_address) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # A client gone: no news.
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
