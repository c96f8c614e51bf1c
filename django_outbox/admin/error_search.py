"""The admin's search of error messages (``error:TEXT``), along a trigram index where it helps.

Without an index, a search of errors reads the jobs in the list's order until a page is full: a
text that many jobs' errors hold fills it at once; a text that none holds reads every job (a
quarter of a second at 1,000,000 jobs). On PostgreSQL with pg_trgm, migration 0021 builds a
trigram index of the jobs with an error, which finds the few jobs whose error holds a text
without reading the others. It serves a text that few jobs' errors hold; for one that many hold,
reading each match from the table and sorting them all costs more than the list's own order.
The planner cannot tell the two apart (it has no statistics of what the errors hold), so the
search asks the index first how many jobs match, up to ``FEW_MATCHES``, and only then names the
index's condition, without which the planner cannot use it.
"""

from __future__ import annotations

from django.db import OperationalError, connections
from django.db.models import QuerySet

from ..db import reports_for
from ..db.time_limits import is_time_limit, query_time_limit
from ..models import Job

#: The shortest text a trigram index looks up (pg_trgm's trigrams are three characters).
TRIGRAM_LENGTH = 3
#: The most jobs a search may match to be read along the trigram index.
FEW_MATCHES = 1_000
#: Seconds the look at the index may take: past them, the search is read as before.
PROBE_TIME_LIMIT = 0.05


def error_search(jobs: QuerySet[Job], text: str) -> QuerySet[Job]:
    """The jobs of ``jobs`` whose last error contains ``text`` (case-insensitive)."""
    matches = jobs.filter(last_error__icontains=text)
    connection = connections[jobs.db]
    if len(text) < TRIGRAM_LENGTH or not reports_for(connection).has_error_trigram_index(
        connection
    ):
        return matches
    # The index's condition: no empty error holds the text, so the result is the same.
    along_index = matches.exclude(last_error="")
    probe = along_index.order_by().values("pk")[: FEW_MATCHES + 1]
    try:
        with query_time_limit(jobs.db, PROBE_TIME_LIMIT):
            found = probe.count()
    except OperationalError as error:
        if not is_time_limit(error):
            raise
        return matches
    return along_index if found <= FEW_MATCHES else matches
