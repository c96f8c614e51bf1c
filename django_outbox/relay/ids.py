"""Message ids: UUIDv7 (RFC 9562), time-ordered, so that id order is publish order."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_millisecond = 0
_counter = 0
#: The 12-bit counter after the timestamp starts at a random value below this, leaving room
#: for many ids in one millisecond before the timestamp must move on.
_COUNTER_START_MAX = 1 << 11


def uuid7() -> uuid.UUID:
    """Return a new UUIDv7: 48 bits of Unix milliseconds, a 12-bit counter, 62 random bits.

    Ids from one process increase strictly (the counter orders those of one millisecond and,
    when it runs out or the clock steps back, the timestamp is carried forward), so a key's
    messages published by one process are ordered by their ids.
    """
    global _last_millisecond, _counter
    with _lock:
        millisecond = time.time_ns() // 1_000_000
        if millisecond > _last_millisecond:
            _last_millisecond = millisecond
            _counter = int.from_bytes(os.urandom(2), "big") % _COUNTER_START_MAX
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_millisecond += 1
                _counter = 0
        millisecond, counter = _last_millisecond, _counter
    random_bits = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (millisecond & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= counter << 64
    value |= 0b10 << 62  # the RFC 4122 variant
    value |= random_bits
    return uuid.UUID(int=value)
