"""kombu's filesystem transport, the embedded mode's broker, with its files written atomically.

kombu's own creates a message file, then locks and writes it, while `_get` takes any file with
the queue's name without a lock; and the first binding to an exchange creates its table file
the same way, while another binding reads it under the lock. A worker at the wrong moment reads
an empty file, fails to decode it and stops ("Unrecoverable error: JSONDecodeError"). Here a
file is written whole under a name nothing reads, then moved into place.
"""

import os
import time
import uuid

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: dict, **kwargs: object) -> None:
        """Put a message on `queue`: written in full, then made visible at once."""
        # Wall-clock nanoseconds keep names in the order they were put across processes.
        name = f"{time.time_ns()}_{uuid.uuid4()}.{queue}.msg"
        path = os.path.join(self.data_folder_out, name)
        partial = f"{path}.partial"  # `_get` reads only names ending in `.<queue>.msg`.
        body = str_to_bytes(dumps(payload))
        try:
            with open(partial, "wb") as file:
                file.write(body)
            os.replace(partial, path)
        except OSError as error:
            raise ChannelError(f"Cannot add file {path!r} to directory") from error

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Bind as kombu does, once the exchange's table file exists with a valid table."""
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        if not table.exists():
            partial = table.with_name(f"{table.name}.{uuid.uuid4()}.partial")
            partial.write_bytes(str_to_bytes(dumps([])))
            try:
                os.link(partial, table)  # Creates it only if no other binding did first.
            except FileExistsError:
                pass
            finally:
                partial.unlink()
        super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    Channel = Channel
