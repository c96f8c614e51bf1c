"""Context variables captured at enqueue and restored around the job's run: a request id or a
log context follows the work into the worker.

``OUTBOX["CONTEXT"]`` lists the dotted paths of ``contextvars.ContextVar`` objects. At
enqueue, each one that holds a value in the caller's context is stored with the job (encoded as
payloads are); the worker sets them around the handler and its own log lines for the job.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..conf import get_settings
from ..exceptions import PayloadError
from ..serialization import encode
from ..validation.loaders import load_context_variable

_UNSET = object()


@functools.cache
def _variable(path: str) -> contextvars.ContextVar[Any]:
    return load_context_variable(path)


def capture() -> dict[str, Any] | None:
    """Return the configured variables that hold a value here, encoded; None if there are none."""
    paths = get_settings().context
    if not paths:
        return None
    captured = {}
    for path in paths:
        value = _variable(path).get(_UNSET)
        if value is not _UNSET:
            try:
                captured[path] = encode(value, path)
            except PayloadError as error:
                raise PayloadError(
                    f"OUTBOX['CONTEXT']: the context variable {error} Store something JSON "
                    "can hold in it (an id, a dict of strings), or leave it out of CONTEXT."
                ) from error
    return captured or None


@contextmanager
def restored(captured: dict[str, Any] | None) -> Iterator[None]:
    """Set the captured variables (decoded) for the duration of the block."""
    if not captured:
        yield
        return
    tokens = []
    for path, value in captured.items():
        try:
            variable = _variable(path)
        except (ImportError, TypeError):
            # Captured by a deploy that had this variable; this one does not: run without it.
            continue
        tokens.append((variable, variable.set(value)))
    try:
        yield
    finally:
        for variable, token in reversed(tokens):
            variable.reset(token)
