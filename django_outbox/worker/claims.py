"""Which claims a worker runs, in what order: plain, full and fair.

Three claims take different jobs (``ClaimKind``). On PostgreSQL the plain claim leaves out
jobs with a lock key or dependencies: the full claim checks, for each candidate, its key's line
and its dependencies, and setting those checks up costs about 0.5 ms a claim even when no
candidate needs them (docs/performance.md, "What makes it fast"). On SQLite every claim is
full. Fair jobs (``fair_key``) are claimed apart on both, by round (fairness.py), as no order
of the other claims' index serves them.

A worker starts with its base claim (plain, or full where plain claims don't pay) and, when it
comes back short (or at its first claim), asks which other kinds are due (one look along
their partial indexes) and claims those for the rest. So keyed, dependent and fair jobs wait at
most one extra statement when workers have room. While the base claim keeps every thread
busy, the full claim replaces it at least once per poll interval (``every``). Fair jobs and the
others take turns: fair jobs are claimed first on every other round of claims while both fill
their claims, on every round for an interval after the others left room, and at least once per
interval when none were found: neither kind can hold the other up. Limited jobs (under a
concurrency cap or rate limit) are claimed last in a round that has room, when a look found
some or the last limited claim left some held back (a running job's end, or a token, may let
them start), and at least once per interval; first while they fill their claims and the
others found none, until the others are due again (once per interval, or once a claim of
limited jobs leaves room).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..db.base import ClaimKind


class _Looks:
    """What a worker knows of the jobs of one kind: whether some may wait (None: not known
    yet), and since when."""

    def __init__(self, waiting: bool | None) -> None:
        self.waiting = waiting
        self.last_look = float("-inf")

    def claimed(self, claimed: int, limit: int) -> None:
        """A claim took ``claimed`` of ``limit``: a full batch may have left more."""
        self.looked(claimed >= limit)

    def looked(self, waiting: bool) -> None:
        self.waiting = waiting
        self.last_look = time.monotonic()

    def due(self, every: float) -> bool:
        return bool(self.waiting) or time.monotonic() - self.last_look >= every


class ClaimPolicy:
    """Decides, claim by claim, which claims to run."""

    def __init__(self, every: float, plain_claims: bool = True) -> None:
        self.every = every
        self.plain_claims = plain_claims
        # Keyed and dependent jobs: unknown at start, so the first claim is full (it takes
        # every other job too).
        self._full = _Looks(waiting=True)
        # Fair jobs: unknown at start, and a claim of them would take nothing else; the first
        # round of claims looks (``wants_a_look``) instead.
        self._fair = _Looks(waiting=None)
        self._fair_went_first = False
        # The other jobs: while they fill their claims, they and fair jobs take turns.
        self._base = _Looks(waiting=True)
        # Limited jobs: unknown at start; the first round of claims looks.
        self._limited = _Looks(waiting=None)
        self._limited_held_back = False

    def claim_round(
        self,
        limit: int,
        claim: Callable[[ClaimKind, int], int],
        look: Callable[[], set[ClaimKind]],
    ) -> int:
        """Claim up to ``limit`` jobs in one round of claims; return how many were claimed.

        ``claim(kind, count)`` claims up to ``count`` jobs of ``kind`` and returns how many it
        got; ``look()`` returns the kinds with jobs due (``DatabaseQueries.waiting_kinds``).
        """
        claimed = 0
        taken: set[ClaimKind] = set()

        def take(kind: ClaimKind) -> None:
            nonlocal claimed
            asked = limit - claimed
            got = claim(kind, asked)
            self.claimed(kind, got, asked)
            taken.add(kind)
            claimed += got

        fair_first = self.fair_first()
        self._fair_went_first = fair_first
        if fair_first:
            take(ClaimKind.FAIR)
        elif self.limited_first():
            take(ClaimKind.LIMITED)
        if claimed < limit:
            take(self.base())
        if (
            claimed < limit
            and ClaimKind.LIMITED not in taken
            and self._limited.waiting is not None
            and self._limited.due(self.every)
        ):
            take(ClaimKind.LIMITED)
        if self.wants_a_look(taken, room=claimed < limit):
            for kind in self.looked(taken, look()):
                if claimed < limit:
                    take(kind)
        return claimed

    def limited_held_back(self) -> None:
        """The last limited claim passed over jobs that a limit held back: claim again at
        the next round (a running job may have ended, a token come)."""
        self._limited_held_back = True

    def fair_first(self) -> bool:
        """Whether this round of claims starts with fair jobs."""
        if self._fair.waiting is None or not self._fair.due(self.every):
            return False
        overdue = not self._fair.waiting
        # Every other round while both kinds fill their claims; every round for an interval
        # after the others left room.
        return overdue or not (self._fair_went_first and self._base.due(self.every))

    def limited_first(self) -> bool:
        """Whether this round of claims starts with limited jobs: while they fill their claims
        and the other jobs' last claim left room (a drain of limited jobs alone), until the
        others are due again (at least once per interval). A round that starts with the
        others' claim would find nothing, one statement spent for it each round."""
        return bool(self._limited.waiting) and not self._base.due(self.every)

    def base(self) -> ClaimKind:
        """The claim for jobs that are not fair: full where plain claims don't pay, or when
        keyed and dependent jobs may wait, or once per interval."""
        if not self.plain_claims or self._full.due(self.every):
            return ClaimKind.FULL
        return ClaimKind.PLAIN

    def claimed(self, kind: ClaimKind, claimed: int, limit: int) -> None:
        """A claim of ``kind`` took ``claimed`` of ``limit`` jobs."""
        if kind is ClaimKind.FAIR:
            self._fair.claimed(claimed, limit)
            return
        if kind is ClaimKind.LIMITED:
            self._limited.looked(claimed >= limit or self._limited_held_back)
            self._limited_held_back = False
            return
        self._base.claimed(claimed, limit)
        if kind is ClaimKind.FULL:
            self._full.claimed(claimed, limit)

    def wants_a_look(self, taken: set[ClaimKind], room: bool) -> bool:
        """Whether to look which other kinds are due, after the claims of kinds ``taken``:
        when they left ``room`` and other kinds may be due, or to learn whether fair jobs wait."""
        if self._fair.waiting is None or self._limited.waiting is None:
            return True
        return room and (
            ClaimKind.FAIR not in taken
            or ClaimKind.LIMITED not in taken
            or (self.plain_claims and ClaimKind.FULL not in taken)
        )

    def looked(self, taken: set[ClaimKind], waiting: set[ClaimKind]) -> list[ClaimKind]:
        """Record a look that found jobs of kinds ``waiting``; return the claims to run next."""
        following = []
        if self.plain_claims and ClaimKind.FULL not in taken:
            self._full.looked(ClaimKind.FULL in waiting)
            if ClaimKind.FULL in waiting:
                following.append(ClaimKind.FULL)
        if ClaimKind.FAIR not in taken:
            self._fair.looked(ClaimKind.FAIR in waiting)
            if ClaimKind.FAIR in waiting:
                following.append(ClaimKind.FAIR)
        if ClaimKind.LIMITED not in taken:
            self._limited.looked(ClaimKind.LIMITED in waiting)
            if ClaimKind.LIMITED in waiting:
                following.append(ClaimKind.LIMITED)
        return following
