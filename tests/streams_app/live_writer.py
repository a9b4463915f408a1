"""Write a stream from its own process, as a Celery worker does.

`python -m tests.streams_app.live_writer STREAM_ID COUNT [PAUSE]` writes COUNT text deltas one
by one, PAUSE seconds apart, spread over steps of 100, then ends the stream with
`{"chunks": COUNT}`.
"""

import os
import sys
import time

import django


def main(stream_id: str, count: int, pause: float) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
    django.setup()
    from streams_app.backends import get_stream_manager

    manager = get_stream_manager()
    writer = manager.create_writer(stream_id, "run-live", "researcher")
    for n in range(count):
        writer.write(
            {"type": "text_delta", "step": n // 100, "sessionId": stream_id, "delta": f"{n} "}
        )
        time.sleep(pause)
    manager.end_stream(stream_id, {"chunks": count})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
