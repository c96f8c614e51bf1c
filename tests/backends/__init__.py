"""The suite's database backends: Django's own, with a cheaper flush between tests.

A test that runs workers (``transaction=True``) ends with Django's flush: on PostgreSQL a
TRUNCATE of every table (70 to 80 ms: each table and index gets a new file), then the
post_migrate signal, which recreates the content types and permissions the flush removed
(70 to 120 ms). Over 500 such tests a leg, that was a minute and a half of the suite. These
backends empty the tables with DELETE (a few ms for the handful of rows a test leaves) and
keep the content types and permissions, which post_migrate would only recreate as they were.
Everything else is Django's backend unchanged.
"""
