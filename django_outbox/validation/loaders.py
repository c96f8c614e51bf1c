"""Objects that settings name by dotted path: codecs and context variables.

Each loader imports the object and checks it is of the kind the setting needs; the ``*_error``
twins say why a path cannot be used, for the system checks. Callers that use the objects at run
time cache them (``codecs.codec_at``, ``jobs.context_variables``).
"""

from __future__ import annotations

import contextvars
from typing import Any

from django.utils.module_loading import import_string


def codec_error(codec: object) -> str | None:
    """Return why ``codec`` cannot serve as a codec, or None."""
    if not (callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))):
        return f"a codec needs encode(value) and decode(data) methods; {codec!r} lacks them."
    return None


def load_codec(path: str) -> Any:
    """Return the codec at dotted ``path`` (a class is instantiated without arguments).

    Raise ImportError, or TypeError for an object without encode() and decode().
    """
    found = import_string(path)
    codec = found() if isinstance(found, type) else found
    if problem := codec_error(codec):
        raise TypeError(problem)
    return codec


def codec_setting_error(path: object) -> str | None:
    """Return why ``OUTBOX["CODEC"]`` cannot be used, or None."""
    if path is None:
        return None
    if not isinstance(path, str):
        return f"must be a dotted path (a string) or None, not {type(path).__name__}."
    try:
        load_codec(path)
    except ImportError as error:
        return f"{path} cannot be imported ({error})."
    except TypeError as error:
        return f"{path}: {error}"
    return None


def load_context_variable(path: str) -> contextvars.ContextVar[Any]:
    """Return the ContextVar at dotted ``path``; raise ImportError, or TypeError for another
    kind of object."""
    variable = import_string(path)
    if not isinstance(variable, contextvars.ContextVar):
        raise TypeError(f"OUTBOX['CONTEXT']: {path} is not a contextvars.ContextVar.")
    return variable


def context_variable_error(path: object) -> str | None:
    """Return why ``path`` does not name a ContextVar, or None."""
    if not isinstance(path, str):
        return f"entries must be dotted paths (strings), not {type(path).__name__}."
    try:
        load_context_variable(path)
    except ImportError as error:
        return f"{path} cannot be imported ({error})."
    except TypeError as error:
        return str(error)
    return None
