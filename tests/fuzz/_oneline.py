"""The property every reader holds: a value, or one InputError line -- never another exception.

The GPU-ledger engineer's GGUF header reader plugs in here: ``assert_reads_or_one_line(lambda: read_profile(path))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fleetgate.errors import InputError

T = TypeVar("T")


def assert_reads_or_one_line(read: Callable[[], T]) -> T | InputError:
    try:
        return read()
    except InputError as error:
        message = str(error)
        assert "\n" not in message and "\r" not in message, repr(message)
        assert message.strip(), "an empty error line"
        return error
