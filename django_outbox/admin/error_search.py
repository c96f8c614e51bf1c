"""The admin's search of error messages (``error:TEXT``), along a trigram index where it helps.

Without an index, a search of errors reads the jobs in the list's order until a page is full: a
text that many jobs' errors hold fills it at once; a text that none holds reads every job (a
quarter of a second at 1,000,000 jobs). On PostgreSQL with pg_trgm, migration 0021 builds a
trigram index of the jobs with an error, which finds the few jobs whose error holds a text
without reading the others. It serves a text that few jobs' errors hold; for one that many hold,
reading each match from the table and sorting them all costs more than the list's own order.
The planner cannot tell the two apart (it has no statistics of what the errors hold), so the
search decides, where the index exists:

1. the first page in the list's order, under ``LIST_ORDER_TIME_LIMIT``: if it comes in time, the
   list is read so (the common text; the look costs what the page costs);
2. else the jobs the index finds, counted up to ``FEW_MATCHES`` (under ``COUNT_TIME_LIMIT``):
   if they are few, the list names the index's condition (without which the planner cannot use
   it) and is read along it; if many, in the list's order, as without the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import OperationalError, connections
from django.db.models import QuerySet

from ..db import reports_for
from ..db.time_limits import is_time_limit, query_time_limit
from ..models import Job

#: The shortest text a trigram index looks up (pg_trgm's trigrams are three characters).
TRIGRAM_LENGTH = 3
#: The most jobs a search may match to be read along the trigram index.
FEW_MATCHES = 1_000
#: Seconds the first page in the list's order may take before the index is asked.
LIST_ORDER_TIME_LIMIT = 0.02
#: Seconds the count along the index may take: past them, the list's order is read.
COUNT_TIME_LIMIT = 0.05
#: The rows of the first page (the admin's list_per_page) and one to know of a next.
FIRST_PAGE_ROWS = 51


def error_search(jobs: QuerySet[Job], text: str, ordering: Sequence[Any]) -> QuerySet[Job]:
    """The jobs of ``jobs`` whose last error contains ``text`` (case-insensitive), for a list in
    ``ordering``."""
    matches = jobs.filter(last_error__icontains=text)
    connection = connections[jobs.db]
    if len(text) < TRIGRAM_LENGTH or not reports_for(connection).has_error_trigram_index(
        connection
    ):
        return matches
    if first_page_is_quick(matches, ordering):
        return matches
    # The index's condition: no empty error holds the text, so the result is the same.
    along_index = matches.exclude(last_error="")
    found = _within(along_index.order_by().values("pk")[: FEW_MATCHES + 1], COUNT_TIME_LIMIT)
    return along_index if found is not None and found <= FEW_MATCHES else matches


def first_page_is_quick(matches: QuerySet[Job], ordering: Sequence[Any]) -> bool:
    """Whether the first page of ``matches`` in ``ordering`` is read within
    ``LIST_ORDER_TIME_LIMIT``."""
    first_page = matches.order_by(*ordering).values("pk")[:FIRST_PAGE_ROWS]
    # Serial: this query is the one expected to be stopped (a text few errors hold).
    return _within(first_page, LIST_ORDER_TIME_LIMIT, serial=True) is not None


def _within(rows: QuerySet[Any], seconds: float, *, serial: bool = False) -> int | None:
    """How many rows ``rows`` holds, or None if reading them takes more than ``seconds``."""
    try:
        with query_time_limit(rows.db, seconds, serial=serial):
            return len(list(rows))
    except OperationalError as error:
        if not is_time_limit(error):
            raise
        return None
