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

The record keeps regular files, directories and symbolic links. FIFOs, sockets and device nodes
a command leaves, and names that are not UTF-8, are removed instead (never opened), so the
directory holds what a restore would give back, and named in that command's result. Stored
manifests are checked before every restore (an archived run's can be edited): a path that is
not plainly inside the workspace, or an entry under anything but a recorded directory, refuses
the restore before anything is written, and the tree is written one directory at a time without
following links.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren import ToolCallContext
from toren.plugin import ToolError, kind_of
from toren.plugin.drivers import ManifestSeqTaken, ToolManifest, ToolStateStore
from toren_sandbox.config import MIB, SandboxConfig, workspaces_root
from toren_sandbox.files import DIR_FLAGS, FILE_FLAGS, open_regular, parent_fd

log = logging.getLogger(__name__)
#: Seconds between two sweeps of this worker's disk for workspaces of finished runs.
SWEEP_INTERVAL_S = 60.0
#: Blobs written to the store in one statement at most (bytes, roughly).
_BATCH_BYTES = 8 * MIB
#: Paths of more components than this are not recorded (the call that made them is undone).
MAX_DEPTH = 128
#: Longest file name, and longest symbolic link target, in bytes (Linux's NAME_MAX, PATH_MAX).
_NAME_MAX = 255
_PATH_MAX = 4095
#: Special files named in a command's result at most (then how many more).
_NOTED = 10
_DIGEST = re.compile(r"[0-9a-f]{64}")

#: An entry of a manifest: ``["f", sha256, size, executable]``, ``["l", target]`` or ``["d"]``.
Entry = list[Any]
#: What tells an unchanged file from a changed one without reading it.
StatKey = tuple[int, int, int, int]


class WorkspaceTooLarge(ToolError):
    """A call left the workspace over ``sandbox.maxWorkspaceMb``; the call was undone."""

    code = "workspace_too_large"


class WorkspaceUnrecordable(ToolError):
    """A call left the workspace in a state that cannot be recorded; the call was undone."""

    code = "workspace_unrecordable"


class WorkspaceManifestInvalid(ToolError):
    """A stored manifest of the workspace is malformed or would write outside it: the
    workspace is not restored, and nothing is written."""

    code = "workspace_manifest_invalid"


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
    entries: dict[str, Entry] = field(default_factory=dict)
    stats: dict[str, StatKey] = field(default_factory=dict)
    #: Contents read while hashing files whose stat changed, by digest.
    contents: dict[str, bytes] = field(default_factory=dict)
    total_bytes: int = 0
    #: What the scan removed instead of recording, and why: path -> "a FIFO (named pipe)".
    dropped: dict[str, str] = field(default_factory=dict)


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
    async def open(self, context: ToolCallContext, config: SandboxConfig, *, mutating: bool,
                   notes: list[str] | None = None) -> AsyncIterator[Path]:
        """The workspace of the call's task, current, locked for the call; on exit, if the
        call may have changed it, its changes are recorded (or undone if over the cap).

        ``notes`` receives a line for the model about what the record left out (special
        files the call made, which are removed)."""
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
                    await self._record(context, config, directory, head, notes)
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
                      head: Head, notes: list[str] | None) -> None:
        assert context.state is not None
        limit = config.max_workspace_mb * MIB
        try:
            scan = await asyncio.to_thread(scan_directory, directory, head, limit_bytes=limit)
        except WorkspaceUnrecordable:
            await self._undo(context.state, context.agent, directory, head)
            raise
        if scan.dropped:
            if notes is not None:
                notes.append(dropped_note(scan.dropped))
            log.info("sandbox workspace %s: removed %d special files (%s)", directory,
                     len(scan.dropped), ", ".join(list(scan.dropped)[:_NOTED]))
        if scan.entries == head.entries:
            head.stats = scan.stats
            return
        if scan.total_bytes > limit:
            await self._undo(context.state, context.agent, directory, head)
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

    async def _undo(self, state: ToolStateStore, agent: str, directory: Path,
                    head: Head) -> None:
        """Put the directory back as ``head`` recorded it (the call's changes are dropped)."""
        await materialize(state, agent, directory, head.entries, owner=self.owner)
        head.stats = {}

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
        _check_parent(cursor)
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
    replayed forwards (``check_entries`` validates the result before anything is written)."""
    chain = [manifest]
    while not chain[-1].full:
        parent = chain[-1].parent_seq
        if parent is None or parent not in by_seq:
            raise ToolError(f"the sandbox's manifest {chain[-1].seq} names a missing parent "
                            f"{parent}; the stored workspace is incomplete")
        _check_parent(chain[-1])  # a parent's seq is smaller: the walk ends
        chain.append(by_seq[parent])
    entries: dict[str, Entry] = {}
    for step in reversed(chain):
        if not isinstance(step.entries, Mapping) or not isinstance(step.removed, list | tuple) \
                or not all(isinstance(path, str) for path in step.removed):
            raise _invalid(f"manifest {step.seq} is not a mapping of entries and a list of "
                           "removed paths")
        if step.full:
            entries = {}
        for path in step.removed:
            entries.pop(path, None)
        for path, entry in step.entries.items():
            entries[path] = list(entry) if isinstance(entry, list) else entry
    return entries


def _check_parent(manifest: ToolManifest) -> None:
    if not isinstance(manifest.parent_seq, int) or manifest.parent_seq >= manifest.seq:
        raise _invalid(f"manifest {manifest.seq} names {manifest.parent_seq!r} as its parent; "
                       "a parent is an earlier manifest")


def _invalid(why: str) -> WorkspaceManifestInvalid:
    return WorkspaceManifestInvalid(
        f"the sandbox's stored workspace of this task cannot be restored: {why}; nothing was "
        "written. Its stored manifests were damaged or edited (an archive changed by hand?): "
        "restore the run from an intact archive, or start a new run")


def check_entries(entries: Mapping[str, Entry]) -> None:
    """Refuse (``WorkspaceManifestInvalid``) entries that are malformed, or that would write
    outside the workspace or through a link: every path relative, in plain components (no
    ``..``, ``.``, empty or over-long ones, no NUL), under a recorded directory."""
    for path, entry in entries.items():
        shown = _short(path)
        if not isinstance(path, str) or not path:
            raise _invalid(f"the entry {shown} is not a path")
        parts = path.split("/")
        reason = _bad_path(path, parts)
        if reason:
            raise _invalid(f"the entry {shown} {reason}")
        if len(parts) > 1:
            parent = "/".join(parts[:-1])
            above = entries.get(parent)
            if above != ["d"]:
                what = "not recorded" if above is None else "not a directory"
                raise _invalid(f"the entry {shown} lies under {_short(parent)}, which is {what} "
                               "(an entry under a link would be written where it points)")
        reason = _bad_entry(entry)
        if reason:
            raise _invalid(f"the entry {shown} {reason}")


def _bad_path(path: str, parts: list[str]) -> str | None:
    if "\x00" in path:
        return "contains a NUL character"
    if path.startswith("/"):
        return "is an absolute path"
    if any(part in ("", ".", "..") for part in parts):
        return "is not a plain relative path (an empty, '.' or '..' component)"
    if len(parts) > MAX_DEPTH:
        return f"is nested more than {MAX_DEPTH} directories deep"
    try:
        if any(len(part.encode()) > _NAME_MAX for part in parts):
            return f"has a component longer than {_NAME_MAX} bytes"
    except UnicodeEncodeError:
        return "is not valid Unicode"
    return None


def _bad_entry(entry: object) -> str | None:
    if not isinstance(entry, list) or not entry or entry[0] not in ("f", "l", "d"):
        return "is not a file, a link or a directory"
    if entry[0] == "d":
        return None if len(entry) == 1 else "is a malformed directory"
    if entry[0] == "l":
        target = entry[1] if len(entry) == 2 else None
        if not isinstance(target, str) or not target or "\x00" in target:
            return "is a malformed link"
        try:
            return "has a link target that is too long" if len(target.encode()) > _PATH_MAX \
                else None
        except UnicodeEncodeError:
            return "has a link target that is not valid Unicode"
    if (len(entry) != 4 or not isinstance(entry[1], str) or not _DIGEST.fullmatch(entry[1])
            or type(entry[2]) is not int or entry[2] < 0 or not isinstance(entry[3], bool)):
        return "is a malformed file (it needs a SHA-256, a size and an executable flag)"
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def materialize(state: ToolStateStore, agent: str, directory: Path,
                      entries: Mapping[str, Entry], *, owner: int | None = None) -> None:
    """Make ``directory`` hold exactly ``entries`` (its blobs read from the store); entries
    ``check_entries`` refuses leave the directory as it was."""
    check_entries(entries)
    digests = {entry[1] for entry in entries.values() if entry[0] == "f"}
    blobs = await state.load_blobs(agent, digests)
    missing = digests - set(blobs)
    if missing:
        raise ToolError(f"the sandbox's stored workspace lacks {len(missing)} file contents; "
                        "it cannot be restored")
    await asyncio.to_thread(_write_tree, directory, entries, blobs, owner)


def _write_tree(directory: Path, entries: Mapping[str, Entry], blobs: Mapping[str, bytes],
                owner: int | None) -> None:
    """Write ``entries`` (checked) into a fresh ``directory``: each one opened from its parent
    directory's descriptor without following links, so nothing lands outside."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if owner is not None:
        os.lchown(directory, owner, owner)
    for path in sorted(entries):  # a directory sorts before what it holds
        entry = entries[path]
        parts = tuple(path.split("/"))
        with parent_fd(directory, parts, create=False) as parent:
            name = parts[-1]
            if entry[0] == "d":
                os.mkdir(name, 0o777, dir_fd=parent)
            elif entry[0] == "l":
                os.symlink(entry[1], name, dir_fd=parent)
            else:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS,
                             0o777 if entry[3] else 0o666, dir_fd=parent)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(blobs[entry[1]])
            if owner is not None:
                os.chown(name, owner, owner, dir_fd=parent, follow_symlinks=False)


def scan_directory(directory: Path, head: Head, *, limit_bytes: int | None = None) -> Scan:
    """Every entry under ``directory``, walked by descriptors without following links; files
    whose stat is unchanged since ``head`` keep their digest without being read again.

    Special files (FIFOs, sockets, devices) and names that are not UTF-8 cannot be
    recorded: they are removed (never opened), and listed in ``Scan.dropped``. Once the files
    add up to more than ``limit_bytes``, changed files are no longer read (the caller refuses
    the state): memory stays bounded by the cap, however large the files a command made.
    Raises ``WorkspaceUnrecordable`` for what cannot be read.
    """
    scan = Scan()
    fd = os.open(directory, DIR_FLAGS)
    try:
        _scan_folder(fd, "", 1, head, scan, limit_bytes)
    finally:
        os.close(fd)
    return scan


def _scan_folder(fd: int, prefix: str, depth: int, head: Head, scan: Scan,
                 limit_bytes: int | None) -> None:
    try:
        with os.scandir(fd) as listing:
            items = sorted((item.name, item.stat(follow_symlinks=False)) for item in listing)
    except OSError as exc:
        raise _unrecordable(prefix.rstrip("/") or ".", exc) from None
    for name, info in items:
        path = prefix + name
        try:
            if not _is_utf8(name):
                _drop(fd, name, info)
                scan.dropped[_printable(path)] = "a name that is not UTF-8"
                continue
            if depth > MAX_DEPTH:
                raise WorkspaceUnrecordable(
                    f"{path[:200]!r} is nested more than {MAX_DEPTH} directories deep, more "
                    "than the sandbox records; this call's changes were undone")
            if stat.S_ISDIR(info.st_mode):
                scan.entries[path] = ["d"]
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                try:
                    _scan_folder(child, path + "/", depth + 1, head, scan, limit_bytes)
                finally:
                    os.close(child)
            elif stat.S_ISLNK(info.st_mode):
                target = os.readlink(name, dir_fd=fd)
                if _is_utf8(target):
                    scan.entries[path] = ["l", target]
                else:
                    _drop(fd, name, info)
                    scan.dropped[path] = "a symbolic link whose target is not UTF-8"
            elif stat.S_ISREG(info.st_mode):
                _scan_file(fd, name, path, info, head, scan, limit_bytes)
            else:
                _drop(fd, name, info)
                scan.dropped[path] = kind_of(info.st_mode)
        except OSError as exc:
            raise _unrecordable(path, exc) from None


def _scan_file(fd: int, name: str, path: str, info: os.stat_result, head: Head, scan: Scan,
               limit_bytes: int | None) -> None:
    key = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    known = head.entries.get(path)
    executable = bool(info.st_mode & 0o111)
    scan.stats[path] = key
    scan.total_bytes += info.st_size
    if head.stats.get(path) == key and known is not None and known[0] == "f":
        scan.entries[path] = [known[0], known[1], known[2], executable]
    elif limit_bytes is not None and scan.total_bytes > limit_bytes:
        scan.entries[path] = ["f", "", info.st_size, executable]  # over the cap: not read
    else:
        data = _read_regular(fd, name, path)
        digest = hashlib.sha256(data).hexdigest()
        scan.contents[digest] = data
        scan.entries[path] = ["f", digest, len(data), executable]


def _read_regular(fd: int, name: str, path: str) -> bytes:
    try:
        file_fd = open_regular(fd, name, os.O_RDONLY, path)
    except ToolError:  # replaced by a special file since it was listed
        raise WorkspaceUnrecordable(f"{path!r} changed while the workspace was recorded; "
                                    "this call's changes were undone") from None
    with os.fdopen(file_fd, "rb") as handle:
        return handle.read()


def _drop(fd: int, name: str, info: os.stat_result) -> None:
    """Remove ``name`` from the directory ``fd`` (a whole tree for a directory), never
    following a link."""
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=fd)
    else:
        os.unlink(name, dir_fd=fd)


def _unrecordable(path: str, exc: OSError) -> WorkspaceUnrecordable:
    return WorkspaceUnrecordable(
        f"the sandbox cannot read {path!r} of the workspace to record it ({exc.strerror}); "
        "this call's changes were undone: leave the workspace's files readable by their owner")


def _is_utf8(name: str) -> bool:
    """Whether a name the OS gave (undecodable bytes as surrogates) is UTF-8 text."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _printable(path: str) -> str:
    return os.fsencode(path).decode(errors="backslashreplace")


def dropped_note(dropped: Mapping[str, str]) -> str:
    """The line a command's result gets about what the scan removed from the workspace."""
    named = ", ".join(f"{path!r} ({why})" for path, why in list(dropped.items())[:_NOTED])
    more = f" and {len(dropped) - _NOTED} more" if len(dropped) > _NOTED else ""
    return (f"[removed from the workspace after the command: {named}{more}. The workspace "
            "keeps regular files, directories and symbolic links with UTF-8 names (what it can "
            "record); make pipes and sockets in /tmp, for the command that uses them]")


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
