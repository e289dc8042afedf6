"""Evals: datasets run against an agent version, each case run a durable run, and its grade
(docs/guides/evals.md)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren.core.evals import CaseRun, EvalRecord


class EvalStore(abc.ABC):
    """Evals and their case runs, kept so that an eval stopped at any moment (a SIGKILL)
    continues where it stopped.

    The host's ``EvalsService`` (``runtime.evals``) calls ``create_eval`` when an eval starts,
    ``claim_case_run`` before it starts the run of a case (the claim, keyed by eval, case and
    repeat, is what makes a resumed eval find the run rather than start another),
    ``set_case_run`` once the run exists, ``grade_case_run`` when the run has ended and been
    graded, and ``finish_eval`` after the last grade. ``toren eval report|compare|list`` and
    ``GET /evals`` read with ``get_eval``, ``list_evals`` and ``case_runs``.
    """

    @abc.abstractmethod
    async def create_eval(self, record: EvalRecord) -> EvalRecord:
        """Keep a new eval (``record.id`` is new, made by the host); the record as kept, with
        ``created_at`` the database's clock. An id already kept is a ``ValueError``."""

    @abc.abstractmethod
    async def get_eval(self, eval_id: str) -> EvalRecord | None:
        """The eval with that id (its whole dataset), or ``None``. An id that is not a UUID
        is ``None`` too."""

    @abc.abstractmethod
    async def list_evals(self, *, agent: str | None = None, limit: int = 50,
                         before: str | None = None) -> list[EvalRecord]:
        """Evals, newest first, of ``agent`` if given, at most ``limit``, only those created
        before the eval ``before`` when it is given (pages)."""

    @abc.abstractmethod
    async def claim_case_run(self, eval_id: str, case_id: str, repeat: int) -> CaseRun:
        """The case run of repeat ``repeat`` of ``case_id``: kept now if it was not (without a
        run yet), else as it was kept (with its run and grade, if any). Two callers at once
        get the same one."""

    @abc.abstractmethod
    async def set_case_run(self, eval_id: str, case_id: str, repeat: int,
                           run_id: str) -> None:
        """Record the run a claimed case run started (idempotent for the same run; a claim
        that names another run already keeps that one)."""

    @abc.abstractmethod
    async def grade_case_run(self, eval_id: str, case_id: str, repeat: int,
                             grade: dict[str, Any]) -> bool:
        """Keep the grade of a case run that has none yet; whether it was kept (``False``:
        graded already; the first grade stays)."""

    @abc.abstractmethod
    async def case_runs(self, eval_id: str) -> list[CaseRun]:
        """Every case run of the eval kept so far, by case id and repeat."""

    @abc.abstractmethod
    async def finish_eval(self, eval_id: str) -> EvalRecord | None:
        """Mark the eval ``finished`` (once; ``finished_at`` the database's clock); the eval
        afterwards, ``None`` for no such eval."""


class EvalLeaseStore(abc.ABC):
    """Who works an eval started over HTTP (``EvalRecord.auto_resume``): one server at a time,
    under a lease, so that an eval survives its server's restart or ``kill -9`` and is worked
    once however many servers share the database.

    The server's eval keeper (``toren.server.evals.EvalKeeper``) calls ``claim_eval_leases``
    when it starts and every third of ``TOREN_LEASE_TTL`` after (and with ``eval_id`` when an
    eval is started or resumed through it), ``renew_eval_leases`` on the same beat for the
    evals it works, ``release_eval_lease`` when it stops working one; ``GET /evals/{id}``
    reads ``eval_lease``. Lease times are the database's clock, so servers with skewed clocks
    agree on when a lease has expired.
    """

    @abc.abstractmethod
    async def claim_eval_leases(self, holder: str, agents: Sequence[str], *, ttl_s: float,
                                limit: int = 10, eval_id: str | None = None,
                                skip: Sequence[str] = ()) -> list[str]:
        """Take the lease, for ``ttl_s`` seconds, of up to ``limit`` running evals of
        ``agents`` that are ``auto_resume`` and whose lease is free, expired or already
        ``holder``'s, oldest first, but those in ``skip`` (evals the holder waits to try
        again); their ids. With ``eval_id``, that eval only (whether ``auto_resume`` or not).
        Two holders claiming at once never both get one eval."""

    @abc.abstractmethod
    async def renew_eval_leases(self, holder: str, eval_ids: Sequence[str], *,
                                ttl_s: float) -> list[str]:
        """Extend by ``ttl_s`` seconds the leases of ``eval_ids`` that ``holder`` still holds;
        those ids (a lease another holder took after it expired is not among them)."""

    @abc.abstractmethod
    async def release_eval_lease(self, holder: str, eval_id: str) -> None:
        """Let the eval's lease go if ``holder`` holds it (another server may claim it)."""

    @abc.abstractmethod
    async def eval_lease(self, eval_id: str) -> str | None:
        """Who holds the eval's lease now (an unexpired one), or ``None``."""
