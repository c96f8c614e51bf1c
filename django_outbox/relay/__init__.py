"""Publishing to message brokers from the caller's transaction: the outbox relay.

``publish()`` (``publishing``) writes a message row in the caller's transaction; the relay
(``loop.Relay``, run by the worker or alone) claims committed messages in short transactions
(``db.messages``), publishes them through one adapter per broker (``brokers/``) with confirms,
and deletes them once confirmed (``outcomes``, fenced by the claim's lease token).
``receive_once`` (``inbox``) is the consumer's side; ``housekeeping`` prunes what is kept.

May import: the base modules and ``db``. The worker runs the relay; ``stats``, ``admin`` and
``testing`` read it; nothing below it imports it.
"""
