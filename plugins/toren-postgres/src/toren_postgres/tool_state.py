"""The ``ToolStateStore`` of the Postgres store: ``tool_blobs`` and ``tool_manifests`` in each
agent's schema."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import psycopg
from psycopg.types.json import Jsonb

from toren.plugin.drivers import ManifestSeqTaken, ToolManifest, ToolStateStore, schema_name_for
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query


class PostgresToolStateStore(PostgresConnection, ToolStateStore):
    """Tool blobs by SHA-256 and manifests by run, scope and seq (agent migration
    ``0008_tool_state``)."""

    async def missing_blobs(self, agent: str, digests: Iterable[str]) -> set[str]:
        wanted = sorted(set(digests))
        if not wanted:
            return set()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                agent_query("missing_tool_blobs", schema_name_for(agent)), {"digests": wanted})
            return {row[0] for row in await cursor.fetchall()}

    async def save_blobs(self, agent: str, blobs: Mapping[str, bytes]) -> None:
        if not blobs:
            return
        digests = sorted(blobs)
        async with self.pool.connection() as conn:
            await conn.execute(agent_query("save_tool_blobs", schema_name_for(agent)), {
                "digests": digests, "contents": [blobs[digest] for digest in digests]})

    async def load_blobs(self, agent: str, digests: Iterable[str]) -> dict[str, bytes]:
        wanted = sorted(set(digests))
        if not wanted:
            return {}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                agent_query("load_tool_blobs", schema_name_for(agent)), {"digests": wanted})
            return {digest: bytes(content) for digest, content in await cursor.fetchall()}

    async def save_manifest(self, agent: str, run_id: str, scope: str,
                            manifest: ToolManifest) -> None:
        try:
            async with self.pool.connection() as conn:
                await conn.execute(agent_query("save_tool_manifest", schema_name_for(agent)), {
                    "run_id": run_id, "scope": scope, "seq": manifest.seq,
                    "parent_seq": manifest.parent_seq, "step": manifest.step,
                    "epoch": manifest.epoch, "call_id": manifest.call_id,
                    "full": manifest.full, "entries": Jsonb(dict(manifest.entries)),
                    "removed": Jsonb(list(manifest.removed)),
                    "total_bytes": manifest.total_bytes})
        except psycopg.errors.UniqueViolation as exc:
            raise ManifestSeqTaken(f"manifest {manifest.seq} of {scope!r} in run {run_id} was "
                                   "written by another worker at the same time") from exc

    async def load_manifests(self, agent: str, run_id: str, scope: str, *,
                             seqs: Iterable[int] | None = None,
                             headers_only: bool = False) -> list[ToolManifest]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                agent_query("load_tool_manifests", schema_name_for(agent)),
                {"run_id": run_id, "scope": scope, "headers_only": headers_only,
                 "seqs": None if seqs is None else sorted(set(seqs))})
            return [ToolManifest(seq=row[0], parent_seq=row[1], step=row[2], epoch=row[3],
                                 call_id=row[4], full=row[5], entries=row[6],
                                 removed=tuple(row[7]), total_bytes=row[8])
                    for row in await cursor.fetchall()]

    async def unfinished_runs(self, agent: str, run_ids: Iterable[str]) -> set[str]:
        wanted = sorted(set(run_ids))
        if not wanted:
            return set()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                agent_query("unfinished_runs", schema_name_for(agent)), {"run_ids": wanted})
            return {row[0] for row in await cursor.fetchall()}
