"""Transactions PostgreSQL aborted to break a deadlock or a serialization conflict, run again.

Such an abort rolls the whole transaction back, so running it again is safe, and is what
PostgreSQL's documentation asks of the application. Only an outermost transaction can be run
again: inside a caller's, the error goes on up to whoever owns the transaction.
"""

import functools
import logging
import random
import time
from collections.abc import Callable

from django.db import OperationalError, connection
from psycopg import errors

logger = logging.getLogger(__name__)
ATTEMPTS = 4
CONFLICTS = (errors.DeadlockDetected, errors.SerializationFailure)


def retried_on_conflict[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    """Run `function`, which owns its transaction, again when PostgreSQL aborted it so."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, ATTEMPTS):
            try:
                return function(*args, **kwargs)
            except OperationalError as error:
                if not isinstance(error.__cause__, CONFLICTS) or connection.in_atomic_block:
                    raise
                logger.info("Transaction aborted (%s); attempt %d", error.__cause__, attempt + 1)
                time.sleep(random.uniform(0, 0.02 * 2**attempt))  # Apart, not in step again.
        return function(*args, **kwargs)

    return wrapper
