"""Durable workspaces: one directory per task on the worker's disk, recorded in Postgres.

After every call that changed the directory, its new files go to the store as content-addressed
blobs (a file already stored is not stored again) and a manifest records the state: every
entry every ``snapshotEvery`` calls, only the changes in between. A call that finds the
directory not known to this process under the task's current lease epoch (another worker ran
the task before, or this one restarted) first rebuilds it from the store, as of the last state
the task's log can have recorded:

- tool results are recorded per step, all of a step's together, after they all ran; so every
  state written by a call of an earlier step is recorded (the latest of them, by step, then
  epoch, then seq, is the one the log shows), and
- a state written at the current step under another epoch belongs to an attempt whose results
  were never recorded: the call is run again from the state before it, so nothing it half did
  leaks in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import shutil
import stat
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren import ToolCallContext
from toren.errors import ToolError
from toren.seams.store import ManifestSeqTaken, ToolManifest, ToolStateStore
from toren_sandbox.config import MIB, SandboxConfig, workspaces_root

log = logging.getLogger(__name__)
#: Seconds between two sweeps of this worker's disk for workspaces of finished runs.
SWEEP_INTERVAL_S = 60.0
#: Blobs written to the store in one statement at most (bytes, roughly).
_BATCH_BYTES = 8 * MIB

#: An entry of a manifest: ``["f", sha256, size, executable]``, ``["l", target]`` or ``["d"]``.
Entry = list[Any]
#: What tells an unchanged file from a changed one without reading it.
StatKey = tuple[int, int, int, int]


class WorkspaceTooLarge(ToolError):
    """A call left the workspace over ``sandbox.maxWorkspaceMb``; the call was undone."""

    code = "workspace_too_large"


def scope_for(task_id: str) -> str:
    return f"sandbox:{task_id}"


@dataclass
class Head:
    """What this process knows its directory holds: the state ``seq`` under ``epoch``."""

    seq: int | None
    epoch: int
    entries: dict[str, Entry]
    stats: dict[str, StatKey] = field(default_factory=dict)
    since_full: int = 0
    next_seq: int = 0


@dataclass
class Scan:
    entries: dict[str, Entry]
    stats: dict[str, StatKey]
    #: Contents read while hashing files whose stat changed, by digest.
    contents: dict[str, bytes]
    total_bytes: int


class Workspaces:
    """The workspaces of this worker process (one per task), with their locks and heads."""

    def __init__(self, root: Path | None = None, *, owner: int | None = None) -> None:
        self._root = root
        #: uid commands run as (the worker is root), given the files so commands can change them.
        self.owner = owner
        self._heads: dict[Path, Head] = {}
        self._locks: dict[Path, asyncio.Lock] = {}
        self._swept: dict[str, float] = {}

    @property
    def root(self) -> Path:
        return self._root or workspaces_root()

    def directory(self, context: ToolCallContext) -> Path:
        return self.root / context.agent / context.run_id / context.task_id

    @asynccontextmanager
    async def open(self, context: ToolCallContext, config: SandboxConfig, *,
                   mutating: bool) -> AsyncIterator[Path]:
        """The workspace of the call's task, current, locked for the call; on exit, if the
        call may have changed it, its changes are recorded (or undone if over the cap)."""
        if context.state is None:
            raise ToolError("this host gives tools no durable store (ToolCallContext.state); "
                            "the sandbox needs one: run it under a Toren worker")
        directory = self.directory(context)
        lock = self._locks.setdefault(directory, asyncio.Lock())
        async with lock:
            await self._sweep(context)
            head = await self._current(context, directory)
            try:
                yield directory
            except BaseException:
                if mutating:  # the call failed midway: what it changed is not recorded
                    self._heads.pop(directory, None)
                raise
            if mutating:
                try:
                    await self._record(context, config, directory, head)
                except BaseException:
                    self._heads.pop(directory, None)
                    raise

    # -- restoring -----------------------------------------------------------------------------

    async def _current(self, context: ToolCallContext, directory: Path) -> Head:
        head = self._heads.get(directory)
        if head is not None and head.epoch == context.epoch and _on_disk(directory):
            return head
        assert context.state is not None
        head = await restore(context.state, context, directory, owner=self.owner)
        self._heads[directory] = head
        return head

    # -- recording -----------------------------------------------------------------------------

    async def _record(self, context: ToolCallContext, config: SandboxConfig, directory: Path,
                      head: Head) -> None:
        assert context.state is not None
        scan = await asyncio.to_thread(scan_directory, directory, head)
        if scan.entries == head.entries:
            head.stats = scan.stats
            return
        limit = config.max_workspace_mb * MIB
        if scan.total_bytes > limit:
            await materialize(context.state, context.agent, directory, head.entries,
                              owner=self.owner)
            head.stats = {}
            raise WorkspaceTooLarge(
                f"the workspace would hold {scan.total_bytes / MIB:.1f} MiB, over its cap of "
                f"{config.max_workspace_mb} MiB (sandbox.maxWorkspaceMb in agent.yaml); this "
                "call's changes were undone: delete files or raise the cap")
        await save_blobs(context.state, context.agent, scan)
        full = head.seq is None or head.since_full + 1 >= config.snapshot_every
        if full:
            entries: dict[str, Entry] = scan.entries
            removed: list[str] = []
        else:
            entries = {path: entry for path, entry in scan.entries.items()
                       if head.entries.get(path) != entry}
            removed = sorted(set(head.entries) - set(scan.entries))
        manifest = ToolManifest(
            seq=head.next_seq, parent_seq=head.seq, step=context.step, epoch=context.epoch,
            call_id=context.call_id, full=full, entries=entries, removed=removed,
            total_bytes=scan.total_bytes)
        scope = scope_for(context.task_id)
        try:
            await context.state.save_manifest(context.agent, context.run_id, scope, manifest)
        except ManifestSeqTaken:
            # a worker whose lease expired wrote one meanwhile: take the next free seq (the
            # restore rule ignores the other, written under an older epoch)
            taken = await context.state.load_manifests(context.agent, context.run_id, scope,
                                                     headers_only=True)
            manifest = dataclasses.replace(manifest, seq=max(m.seq for m in taken) + 1)
            await context.state.save_manifest(context.agent, context.run_id, scope, manifest)
        head.seq, head.entries, head.stats = manifest.seq, scan.entries, scan.stats
        head.since_full = 0 if full else head.since_full + 1
        head.next_seq = manifest.seq + 1

    # -- cleanup -------------------------------------------------------------------------------

    async def _sweep(self, context: ToolCallContext) -> None:
        """Remove this worker's workspaces of the agent's finished runs (at most once a
        minute; their stored copies stay with the run)."""
        now = time.monotonic()
        if now - self._swept.get(context.agent, float("-inf")) < SWEEP_INTERVAL_S:
            return
        self._swept[context.agent] = now
        assert context.state is not None
        await sweep_finished(context.state, context.agent, self.root / context.agent,
                             keep=context.run_id)
        for directory in list(self._heads):
            if not _on_disk(directory):
                self._heads.pop(directory, None)
                self._locks.pop(directory, None)


async def sweep_finished(state: ToolStateStore, agent: str, agent_root: Path, *,
                         keep: str | None = None) -> list[str]:
    """Delete the run directories under ``agent_root`` whose runs finished (or are gone);
    the run ids removed."""
    try:
        names = [entry.name for entry in os.scandir(agent_root) if entry.is_dir()]
    except FileNotFoundError:
        return []
    candidates = [name for name in names if name != keep and _is_uuid(name)]
    if not candidates:
        return []
    unfinished = await state.unfinished_runs(agent, candidates)
    removed = [name for name in candidates if name not in unfinished]
    for name in removed:
        await asyncio.to_thread(shutil.rmtree, agent_root / name, True)
    if removed:
        log.info("removed %d finished runs' sandbox workspaces of %s", len(removed), agent)
    return removed


def _on_disk(directory: Path) -> bool:
    """Whether the directory exists (one stat of a local path: not worth a thread hop)."""
    return directory.is_dir()


def _is_uuid(name: str) -> bool:
    parts = name.split("-")
    return len(name) == 36 and [len(p) for p in parts] == [8, 4, 4, 4, 12]


async def restore(state: ToolStateStore, context: ToolCallContext, directory: Path, *,
                  owner: int | None = None) -> Head:
    """Rebuild ``directory`` as of the last state the task's log can have recorded before the
    call in ``context`` (see the module's docstring); its ``Head``."""
    scope = scope_for(context.task_id)
    headers = await state.load_manifests(context.agent, context.run_id, scope,
                                         headers_only=True)
    by_seq = {manifest.seq: manifest for manifest in headers}
    usable = [m for m in headers
              if m.step < context.step or (m.step == context.step and m.epoch == context.epoch)]
    base = max(usable, key=lambda m: (m.step, m.epoch, m.seq), default=None)
    chain: list[int] = []
    cursor = base
    while cursor is not None:
        chain.append(cursor.seq)
        if cursor.full or cursor.parent_seq is None:
            break
        cursor = by_seq.get(cursor.parent_seq)
    entries: dict[str, Entry] = {}
    if base is not None:
        loaded = await state.load_manifests(context.agent, context.run_id, scope, seqs=chain)
        entries = entries_at(by_seq_of(loaded)[base.seq], by_seq_of(loaded))
    await materialize(state, context.agent, directory, entries, owner=owner)
    return Head(seq=None if base is None else base.seq, epoch=context.epoch, entries=entries,
                since_full=len(chain) - 1 if chain else 0,
                next_seq=max(by_seq, default=-1) + 1)


def by_seq_of(manifests: list[ToolManifest]) -> dict[int, ToolManifest]:
    return {manifest.seq: manifest for manifest in manifests}


def entries_at(manifest: ToolManifest, by_seq: Mapping[int, ToolManifest]) -> dict[str, Entry]:
    """Every entry of the state ``manifest`` records: its chain back to a full manifest,
    replayed forwards."""
    chain = [manifest]
    while not chain[-1].full:
        parent = chain[-1].parent_seq
        if parent is None or parent not in by_seq:
            raise ToolError(f"the sandbox's manifest {chain[-1].seq} names a missing parent "
                            f"{parent}; the stored workspace is incomplete")
        chain.append(by_seq[parent])
    entries: dict[str, Entry] = {}
    for step in reversed(chain):
        if step.full:
            entries = {path: list(entry) for path, entry in step.entries.items()}
            continue
        for path in step.removed:
            entries.pop(path, None)
        entries.update({path: list(entry) for path, entry in step.entries.items()})
    return entries


async def materialize(state: ToolStateStore, agent: str, directory: Path,
                      entries: Mapping[str, Entry], *, owner: int | None = None) -> None:
    """Make ``directory`` hold exactly ``entries`` (its blobs read from the store)."""
    digests = {entry[1] for entry in entries.values() if entry[0] == "f"}
    blobs = await state.load_blobs(agent, digests)
    missing = digests - set(blobs)
    if missing:
        raise ToolError(f"the sandbox's stored workspace lacks {len(missing)} file contents; "
                        "it cannot be restored")
    await asyncio.to_thread(_write_tree, directory, entries, blobs, owner)


def _write_tree(directory: Path, entries: Mapping[str, Entry], blobs: Mapping[str, bytes],
                owner: int | None) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    made = [directory]
    for path in sorted(entries):
        entry = entries[path]
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry[0] == "d":
            target.mkdir(exist_ok=True)
        elif entry[0] == "l":
            os.symlink(entry[1], target)
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o777 if entry[3] else 0o666)
            with os.fdopen(fd, "wb") as handle:
                handle.write(blobs[entry[1]])
        made.append(target)
    if owner is not None:
        for made_path in made:
            os.lchown(made_path, owner, owner)


def scan_directory(directory: Path, head: Head) -> Scan:
    """Every entry under ``directory`` (never following links); files whose stat is unchanged
    since ``head`` keep their digest without being read again."""
    entries: dict[str, Entry] = {}
    stats: dict[str, StatKey] = {}
    contents: dict[str, bytes] = {}
    total = 0
    stack = [("", directory)]
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            path = prefix + item.name
            info = item.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                entries[path] = ["d"]
                stack.append((path + "/", Path(item.path)))
            elif stat.S_ISLNK(info.st_mode):
                entries[path] = ["l", os.readlink(item.path)]
            elif stat.S_ISREG(info.st_mode):
                key = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
                known = head.entries.get(path)
                executable = bool(info.st_mode & 0o111)
                if head.stats.get(path) == key and known is not None and known[0] == "f":
                    entries[path] = [known[0], known[1], known[2], executable]
                else:
                    data = _read_nofollow(item.path)
                    digest = hashlib.sha256(data).hexdigest()
                    contents[digest] = data
                    entries[path] = ["f", digest, len(data), executable]
                stats[path] = key
                total += info.st_size
            # sockets, pipes and devices are not kept
    return Scan(entries, stats, contents, total)


def _read_nofollow(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


async def save_blobs(state: ToolStateStore, agent: str, scan: Scan) -> None:
    """Store the contents of the files the scan read that the store does not hold yet, in
    batches (a file whose stat had not changed was not read: its blob was stored when it
    changed)."""
    missing = await state.missing_blobs(agent, scan.contents)
    batch: dict[str, bytes] = {}
    size = 0
    for digest in sorted(missing):
        batch[digest] = scan.contents[digest]
        size += len(batch[digest])
        if size >= _BATCH_BYTES:
            await state.save_blobs(agent, batch)
            batch, size = {}, 0
    if batch:
        await state.save_blobs(agent, batch)
