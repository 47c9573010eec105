# ruff: noqa: D101, D102, D103
"""TEMPORARY minimal store (replaced by the full one on merge)."""

from __future__ import annotations

import abc
import asyncio
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workflows.errors import AgentRunnerError
from workflows.transcript import ref_for


class StoreError(AgentRunnerError):
    """The content store failed."""


class BlobMissing(StoreError):
    """A blob is missing."""


@dataclass(frozen=True)
class ChainNode:
    head: str
    parent: str | None
    message: str


@dataclass(frozen=True)
class StoreStats:
    blobs: int
    blob_bytes: int
    nodes: int


class ContentStore(abc.ABC):
    url: str

    @abc.abstractmethod
    async def put(self, blobs: Mapping[str, bytes]) -> int: ...

    @abc.abstractmethod
    async def get(self, refs: Sequence[str]) -> dict[str, bytes]: ...

    @abc.abstractmethod
    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None: ...

    @abc.abstractmethod
    async def chain(self, head: str) -> list[str]: ...

    @abc.abstractmethod
    async def stats(self) -> StoreStats: ...

    async def close(self) -> None:
        return None


class _Sqlite(ContentStore):
    def __init__(self, url: str, path: str) -> None:
        self.url = url
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute("CREATE TABLE IF NOT EXISTS blobs(ref TEXT PRIMARY KEY, data BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS nodes(head TEXT PRIMARY KEY, parent TEXT, message TEXT)")
        self._lock = asyncio.Lock()

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        for ref, data in blobs.items():
            if ref != ref_for(data):
                raise StoreError(f"blob {ref} does not match its content")

        def run() -> int:
            written = 0
            for ref, data in blobs.items():
                cur = self._db.execute("INSERT INTO blobs VALUES (?, ?) ON CONFLICT DO NOTHING", (ref, data))
                written += len(data) if cur.rowcount else 0
            return written

        async with self._lock:
            return await asyncio.to_thread(run)

    async def get(self, refs: Sequence[str]) -> dict[str, bytes]:
        def run() -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for ref in set(refs):
                row = self._db.execute("SELECT data FROM blobs WHERE ref = ?", (ref,)).fetchone()
                if row is not None:
                    found[ref] = bytes(row[0])
            return found

        async with self._lock:
            found = await asyncio.to_thread(run)
        missing = sorted(set(refs) - set(found))
        if missing:
            raise BlobMissing(f"the store at {self.url} has no blob {', '.join(missing)}")
        return found

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        def run() -> None:
            for n in nodes:
                self._db.execute(
                    "INSERT INTO nodes VALUES (?, ?, ?) ON CONFLICT DO NOTHING", (n.head, n.parent, n.message)
                )

        async with self._lock:
            await asyncio.to_thread(run)

    async def chain(self, head: str) -> list[str]:
        def run() -> list[str]:
            rows = self._db.execute(
                "WITH RECURSIVE c(head, parent, message, depth) AS ("
                " SELECT head, parent, message, 0 FROM nodes WHERE head = ?"
                " UNION ALL SELECT n.head, n.parent, n.message, c.depth + 1 FROM nodes n JOIN c ON n.head = c.parent)"
                " SELECT message, parent FROM c ORDER BY depth DESC",
                (head,),
            ).fetchall()
            return [r[0] for r in rows] if rows and rows[0][1] is None else []

        async with self._lock:
            refs = await asyncio.to_thread(run)
        if not refs:
            raise BlobMissing(f"the store at {self.url} has no transcript {head}")
        return refs

    async def stats(self) -> StoreStats:
        def run() -> StoreStats:
            blobs, size = self._db.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs").fetchone()
            (nodes,) = self._db.execute("SELECT count(*) FROM nodes").fetchone()
            return StoreStats(blobs=blobs, blob_bytes=size, nodes=nodes)

        async with self._lock:
            return await asyncio.to_thread(run)


def open_store(url: str | None = None) -> ContentStore:
    url = url or os.environ.get("AGENT_RUNNER_STORE") or "memory:"
    if url == "memory:":
        return _Sqlite(url, ":memory:")
    if url.startswith("sqlite:///"):
        return _Sqlite(url, url.removeprefix("sqlite://"))
    raise StoreError(f"unknown store {url}")
