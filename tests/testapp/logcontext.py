"""A context variable as an application keeps one for its logs: the current request's id."""

from contextvars import ContextVar

request_id: ContextVar[str] = ContextVar("request_id")
