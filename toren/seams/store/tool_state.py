"""Durable state that tools keep beside a run: content-addressed blobs and per-call manifests."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toren.errors import ToolError


@dataclass(frozen=True)
class ToolManifest:
    """One recorded state of a tool's durable workspace, written after a tool call changed it.

    ``seq`` orders the manifests of one ``(run_id, scope)``; ``parent_seq`` names the state the
    call started from (``None`` for the first). ``full`` manifests list every entry; the others
    list only what changed since ``parent_seq`` (``entries``) and what was removed
    (``removed``). ``step`` and ``epoch`` are those of the tool call that wrote it, so a
    resumed task can tell a state its log recorded from one a crashed attempt left behind.
    """

    seq: int
    parent_seq: int | None
    step: int
    epoch: int
    call_id: str
    full: bool
    entries: Mapping[str, Any]
    removed: Sequence[str]
    total_bytes: int


class ManifestSeqTaken(ToolError):
    """Another writer recorded a manifest with the same ``seq`` first."""

    code = "manifest_seq_taken"


class ToolStateStore(abc.ABC):
    """Where tools keep state that must survive a worker's death (the sandbox's workspace).

    Called by tool plugins, through ``ToolCallContext.state`` (``toren.current_tool_call()``),
    while a tool call runs; never by the kernel itself. Blobs are content-addressed and shared
    by every run of an agent, so an unchanged file is stored once; manifests belong to one run
    and one ``scope`` (a name the tool chooses, such as ``sandbox:<task id>``) and are kept as
    long as the run's events are.
    """

    @abc.abstractmethod
    async def missing_blobs(self, agent: str, digests: Iterable[str]) -> set[str]:
        """The SHA-256 digests among ``digests`` that are not stored yet for ``agent``."""

    @abc.abstractmethod
    async def save_blobs(self, agent: str, blobs: Mapping[str, bytes]) -> None:
        """Store each blob under its SHA-256 digest (hex); a digest already stored is kept."""

    @abc.abstractmethod
    async def load_blobs(self, agent: str, digests: Iterable[str]) -> dict[str, bytes]:
        """The stored blobs among ``digests`` (digest -> content)."""

    @abc.abstractmethod
    async def save_manifest(self, agent: str, run_id: str, scope: str,
                            manifest: ToolManifest) -> None:
        """Record ``manifest``; its blobs must be saved first. Raises ``ManifestSeqTaken`` if
        its ``seq`` is taken (two writers on one scope: a worker whose lease expired mid-call
        and the one that took the task over)."""

    @abc.abstractmethod
    async def load_manifests(self, agent: str, run_id: str, scope: str, *,
                             seqs: Iterable[int] | None = None,
                             headers_only: bool = False) -> list[ToolManifest]:
        """The scope's manifests in ``seq`` order (only ``seqs`` if given); with
        ``headers_only``, with empty ``entries`` and ``removed`` (to choose which to read)."""

    @abc.abstractmethod
    async def unfinished_runs(self, agent: str, run_ids: Iterable[str]) -> set[str]:
        """The runs among ``run_ids`` that exist and have not finished (what a tool may still
        need files on disk for)."""
