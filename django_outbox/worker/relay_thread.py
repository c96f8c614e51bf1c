"""The relay, run by a worker process in a thread of its own beside its job threads."""

from __future__ import annotations

import logging
import threading

from ..relay.loop import Relay

logger = logging.getLogger(__name__)


class RelayThread:
    """Start a ``Relay`` for every configured broker; stop it with the worker."""

    def __init__(self, worker_id: str) -> None:
        self.relay = Relay(relay_id=worker_id)
        self._thread = threading.Thread(target=self._run, name="outbox-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.relay.run()
        except Exception:
            # The worker's jobs go on; messages wait for the next relay (or this worker's
            # restart), and outbox_health reports their age.
            logger.exception("relay stopped by an error relay=%s", self.relay.relay_id)

    def stop(self, timeout: float) -> None:
        """Stop the relay; wait up to ``timeout`` seconds for its batch in flight."""
        self.relay.request_stop()
        self._thread.join(timeout)
