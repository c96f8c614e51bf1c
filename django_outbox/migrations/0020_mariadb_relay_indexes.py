"""MariaDB and MySQL: the relay's indexes, in place of the partial and expression indexes that
Django leaves out there (the message table's, the inbox's). Nothing on PostgreSQL and SQLite."""

from django.db import migrations

from ._mysql import run_on_mysql

CREATE = [
    # Pending (and blocked) messages in id order, sent ones by when they were sent.
    "CREATE INDEX outbox_message_pending ON django_outbox_message (status, id)",
    "CREATE INDEX outbox_message_sent ON django_outbox_message (status, sent_at)",
    # A key's earlier messages ("key" is a reserved word there).
    "CREATE INDEX outbox_message_key_holds ON django_outbox_message (broker, topic, `key`, id)",
    "CREATE INDEX outbox_inbox_received ON django_outbox_inboxentry (received_at)",
]

DROP = [
    "DROP INDEX outbox_message_pending ON django_outbox_message",
    "DROP INDEX outbox_message_sent ON django_outbox_message",
    "DROP INDEX outbox_message_key_holds ON django_outbox_message",
    "DROP INDEX outbox_inbox_received ON django_outbox_inboxentry",
]


class Migration(migrations.Migration):
    # DDL: MariaDB commits at each statement, and Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [
        ("django_outbox", "0019_mariadb_limited_lane"),
    ]

    operations = [
        run_on_mysql(CREATE, DROP),
    ]
