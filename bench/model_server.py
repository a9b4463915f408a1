"""A model server for the model stream benchmark: `python -m bench.model_server EVENTS DELAY`.

It answers every `POST .../chat/completions` with the same streamed reply, as an
OpenAI-compatible server does: a role chunk, EVENTS content chunks `DELAY` seconds apart, the
finish and the usage, then `[DONE]`, each a server-sent event. It prints its base URL, then
serves until it is stopped. Run in a process of its own, its CPU is not the client's.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The events of a reply beside its content chunks: the role chunk, the finish, the usage.
FRAMING_EVENTS = 3


def reply_events(events: int) -> list[bytes]:
    """Return the reply's server-sent events, encoded, `[DONE]` last."""

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
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def main() -> None:
    events, delay = int(sys.argv[1]), float(sys.argv[2])
    reply = reply_events(events)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for event in reply:
                    self.wfile.write(event)
                    self.wfile.flush()
                    time.sleep(delay)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # Every stream of a round connects at once.

    server = Server(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
