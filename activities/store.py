"""The content-addressed store: message contents live here, workflow history carries only their references.

A blob's reference is ``"sha256:" + hexdigest`` of its bytes (``ref_for``), so writing is idempotent and a reference
can never name two contents: ``put`` refuses a blob under any other key, and ``get`` checks every blob it reads
against its reference (``BlobCorrupted`` if the bytes changed since). A transcript is a chain of nodes, each one
message appended to its parent; the workflow computes a node's ``head`` (whatever identifies the chain up to and
including that message) and the store only keeps ``head -> (parent, message)``. ``chain(head)`` reads a whole
transcript's message references back in one query.

Three backends, chosen by URL (``open_store``):

- ``sqlite:///absolute/path.db`` or ``sqlite:relative/path.db``: one file, shared by every worker process on the
  machine (WAL journal, busy timeout). The default, at ``$XDG_DATA_HOME/agent-runner/store.db``.
- ``postgresql://user:password@host:port/db`` (or ``postgres://``): shared by workers on many machines.
- ``memory:``: this process only, gone when it exits; for tests and benchmarks.

The worker and the client must use the same store: both read ``AGENT_RUNNER_STORE``. This module does I/O, so
workflow code never imports it; it runs in activities.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from workflows.errors import BlobCorrupted, BlobMissing, StoreError
from workflows.transcript import ref_for

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "STORE_ENV",
    "BlobCorrupted",
    "BlobMissing",
    "ChainNode",
    "ContentStore",
    "StoreError",
    "StoreStats",
    "default_store_path",
    "open_store",
    "ref_for",
]

STORE_ENV = "AGENT_RUNNER_STORE"
"""The environment variable naming the store's URL, read by workers and clients alike."""

GET_CHUNK = 500
"""References per ``SELECT``: keeps each statement's parameter list small whatever the caller asks for."""

PUT_CHUNK_BYTES = 64 * 1024 * 1024
"""Blob bytes per ``INSERT`` statement on PostgreSQL; a statement's parameters stay far below its 1 GB limit."""

NODE_CHUNK = 5000
"""Chain nodes per ``INSERT`` statement."""

MAX_CHAIN = 1_000_000
"""Deepest chain ``chain()`` walks. Heads are the caller's hashes, so a cycle means a corrupt store; this bound turns
it into an error instead of a query that never ends."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class ChainNode:
    """One message appended to a transcript chain.

    Attributes:
        head: The caller's identifier of the chain ending with this message (the store does not compute or check it).
        parent: The ``head`` of the chain this message was appended to; ``None`` for the first message.
        message: The reference of the message's blob.
    """

    head: str
    parent: str | None
    message: str


@dataclass(frozen=True)
class StoreStats:
    """What a store holds.

    Attributes:
        blobs: Number of blobs.
        blob_bytes: Their total size in bytes.
        nodes: Number of chain nodes.
    """

    blobs: int
    blob_bytes: int
    nodes: int


class ContentStore(abc.ABC):
    """A content-addressed blob store plus the chain nodes of transcripts.

    Every method is safe to call again with the same arguments (a retried activity does exactly that).

    Attributes:
        url: Where the store is, without any password: it goes into error messages, which reach workflow history.
    """

    url: str

    @abc.abstractmethod
    async def put(self, blobs: Mapping[str, bytes]) -> int:
        """Store blobs; those already present are left as they are.

        Args:
            blobs: Each blob by its reference, which must be ``ref_for(blob)``.

        Returns:
            The number of bytes newly written: 0 when every blob was already there.

        Raises:
            StoreError: A key is not the reference of its blob (nothing is written), or the store failed.
        """

    async def get(self, refs: Sequence[str]) -> dict[str, bytes]:
        """Read blobs, however many, in as few round trips as the backend allows, each checked against its reference.

        Args:
            refs: The references to read; duplicates are read once.

        Returns:
            Each blob by its reference; its bytes hash to it (``ref_for``).

        Raises:
            BlobMissing: Some references are not in the store; it lists every one of them.
            BlobCorrupted: Some blobs' bytes do not hash to their reference; none of them is returned.
        """
        # Every backend's reads pass here, so no caller (the model call above all) can get bytes that changed on
        # disk or in the database after they were stored: a reference names one content, or nothing.
        wanted = _unique(refs)
        found = await self._read(wanted)
        missing = [ref for ref in wanted if ref not in found]
        if missing:
            raise _missing_blobs(self.url, missing)
        corrupted = [ref for ref in wanted if ref_for(found[ref]) != ref]
        if corrupted:
            raise _corrupted_blobs(self.url, corrupted)
        return {ref: found[ref] for ref in wanted}

    @abc.abstractmethod
    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        """The blobs of ``refs`` (no duplicates) that the store holds, as stored; ``get`` checks them."""

    @abc.abstractmethod
    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        """Store chain nodes; a node whose ``head`` is already stored is left as it is."""

    @abc.abstractmethod
    async def chain(self, head: str) -> list[str]:
        """The message references of the chain ending at ``head``, from its first message to its last.

        Raises:
            BlobMissing: ``head``, or one of its ancestors, is not in the store.
        """

    @abc.abstractmethod
    async def stats(self) -> StoreStats:
        """Count what the store holds."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the store's connections. The store cannot be used afterwards."""

    async def __aenter__(self) -> ContentStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


# ------------------------------------------------------------------------------------------------ shared checks


def _check_refs(url: str, blobs: Mapping[str, bytes]) -> None:
    """Refuse the whole write if any key is not its blob's reference: a wrong key would poison every reader."""
    wrong = [key for key, data in blobs.items() if ref_for(data) != key]
    if wrong:
        shown = ", ".join(f"{key!r} (its content is {ref_for(blobs[key])})" for key in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        raise StoreError(
            f"refused to write to the store at {url}: {len(wrong)} key(s) are not the reference of their blob: "
            f"{shown}{more}. Key each blob by activities.store.ref_for(blob)."
        )


def _missing_blobs(url: str, refs: Sequence[str]) -> BlobMissing:
    return BlobMissing(
        f"the store at {url} has no blob {', '.join(refs)}: it was deleted, or stored in another store. The worker "
        f"and the client must use the same {STORE_ENV}; a run that needs this content cannot go on, so start it again "
        "(or fork it from an earlier turn)",
        refs=tuple(refs),
        url=url,
    )


def _corrupted_blobs(url: str, refs: Sequence[str]) -> BlobCorrupted:
    return BlobCorrupted(
        f"the store at {url} holds corrupted content under {', '.join(refs)}: the bytes no longer hash to their "
        "reference, so they were not used. Restore the blobs from a backup, or delete them so that the content can "
        "be stored again; a run that needs this content cannot go on, so start it again (or fork it from an earlier "
        "turn)",
        refs=tuple(refs),
        url=url,
    )


def _missing_node(url: str, head: str, missing: str) -> BlobMissing:
    where = "" if missing == head else f", an ancestor of the chain node {head}"
    return BlobMissing(
        f"the store at {url} has no chain node {missing}{where}; the worker and the client must use the same "
        f"{STORE_ENV}",
        refs=(missing,),
        url=url,
    )


def _resolve_chain(url: str, head: str, rows: Sequence[tuple[str | None, str]]) -> list[str]:
    """Messages from ``rows`` of (parent, message), ordered root first, after checking the walk reached a root."""
    if not rows:
        raise _missing_node(url, head, head)
    if len(rows) >= MAX_CHAIN:
        raise StoreError(f"the chain ending at {head} in the store at {url} is deeper than {MAX_CHAIN} nodes or loops")
    root_parent = rows[0][0]
    if root_parent is not None:
        raise _missing_node(url, head, root_parent)
    return [message for _, message in rows]


def _unique(refs: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(refs))


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -------------------------------------------------------------------------------------------------------- memory


class _MemoryStore(ContentStore):
    """A store in this process's memory, for tests and benchmarks. Nothing survives the process."""

    def __init__(self) -> None:
        self.url = "memory:"
        self._blobs: dict[str, bytes] = {}
        self._nodes: dict[str, tuple[str | None, str]] = {}

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        _check_refs(self.url, blobs)
        written = 0
        for ref, data in blobs.items():
            if ref not in self._blobs:
                self._blobs[ref] = bytes(data)
                written += len(data)
        return written

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        return {ref: self._blobs[ref] for ref in refs if ref in self._blobs}

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        for node in nodes:
            self._nodes.setdefault(node.head, (node.parent, node.message))

    async def chain(self, head: str) -> list[str]:
        rows: list[tuple[str | None, str]] = []
        current: str | None = head
        while current is not None and len(rows) < MAX_CHAIN:
            node = self._nodes.get(current)
            if node is None:
                if rows:
                    # The deepest node found names a parent that is not here: report it as a root-less walk would.
                    break
                raise _missing_node(self.url, head, head)
            rows.append(node)
            current = node[0]
        rows.reverse()
        return _resolve_chain(self.url, head, rows)

    async def stats(self) -> StoreStats:
        return StoreStats(len(self._blobs), sum(map(len, self._blobs.values())), len(self._nodes))

    async def close(self) -> None:
        return None


# -------------------------------------------------------------------------------------------------------- SQLite

# blobs keeps its rowid: SQLite advises against WITHOUT ROWID for rows larger than a twentieth of a page, and blobs
# run to megabytes. nodes rows are small and only ever found by head, so they live in the key's own b-tree.
_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (head TEXT PRIMARY KEY, parent TEXT, message TEXT NOT NULL) WITHOUT ROWID",
)

# One statement walks the chain: the recursive part follows parent links by the primary key, ``depth`` orders it.
_CHAIN_SQL = """
WITH RECURSIVE walk(parent, message, depth) AS (
    SELECT parent, message, 0 FROM nodes WHERE head = {p}
    UNION ALL
    SELECT nodes.parent, nodes.message, walk.depth + 1
    FROM nodes JOIN walk ON nodes.head = walk.parent
    WHERE walk.depth < {max_depth}
)
SELECT parent, message FROM walk ORDER BY depth DESC
"""


class _SqliteStore(ContentStore):
    """A store in one SQLite file, shared by every process on the machine that opens it.

    The file is in WAL mode (readers never wait for the writer) with a busy timeout, and each write is one
    ``BEGIN IMMEDIATE`` transaction, so several worker processes can write at once: they take turns instead of
    failing with ``database is locked``.

    Args:
        path: The database file; created, with its schema, if missing.
        url: The URL it was opened by, for messages.
        busy_timeout_ms: How long a write waits for another process's write to finish.
    """

    def __init__(self, path: Path, url: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.url = url
        self.path = path
        # The stdlib driver on one thread of our own rather than aiosqlite: aiosqlite does the same (a thread per
        # connection) plus a dependency. One thread owns the connection, so no lock is needed around it, and the
        # event loop never waits on disk or on another process's write lock.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-runner-store")
        self._conn = self._executor.submit(self._connect, busy_timeout_ms).result()
        self._closed = False

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the store at {self.url}: {exc}. Check that the directory {self.path.parent} exists and "
                f"is writable, or point {STORE_ENV} elsewhere."
            ) from exc
        try:
            # busy_timeout first: it makes the other pragmas and the schema wait for a concurrent opener.
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL, not NORMAL: once put() returns, the reference goes into workflow history, and a power cut must
            # not leave history naming a blob the file lost.
            conn.execute("PRAGMA synchronous = FULL")
            with _sqlite_write(conn):
                for statement in _SQLITE_SCHEMA:
                    conn.execute(statement)
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot set up the store at {self.url}: {exc}") from exc
        return conn

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise StoreError(f"the store at {self.url} is closed; open it again with open_store()")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, work, self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"the store at {self.url} failed: {exc}") from exc

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        _check_refs(self.url, blobs)
        items = list(blobs.items())

        def work(conn: sqlite3.Connection) -> int:
            written = 0
            with _sqlite_write(conn):
                for ref, data in items:
                    cursor = conn.execute(
                        "INSERT INTO blobs (ref, data) VALUES (?, ?) ON CONFLICT (ref) DO NOTHING", (ref, data)
                    )
                    if cursor.rowcount == 1:
                        written += len(data)
            return written

        return await self._run(work)

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        def work(conn: sqlite3.Connection) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            # One read transaction: every chunk sees the same snapshot.
            with _sqlite_read(conn):
                for chunk in _chunks(refs, GET_CHUNK):
                    marks = ", ".join("?" * len(chunk))
                    found.update(conn.execute(f"SELECT ref, data FROM blobs WHERE ref IN ({marks})", chunk))
            return found

        return await self._run(work)

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        rows = [(node.head, node.parent, node.message) for node in nodes]

        def work(conn: sqlite3.Connection) -> None:
            with _sqlite_write(conn):
                conn.executemany(
                    "INSERT INTO nodes (head, parent, message) VALUES (?, ?, ?) ON CONFLICT (head) DO NOTHING", rows
                )

        await self._run(work)

    async def chain(self, head: str) -> list[str]:
        sql = _CHAIN_SQL.format(p="?", max_depth=MAX_CHAIN)

        def work(conn: sqlite3.Connection) -> list[tuple[str | None, str]]:
            return list(conn.execute(sql, (head,)))

        return _resolve_chain(self.url, head, await self._run(work))

    async def stats(self) -> StoreStats:
        def work(conn: sqlite3.Connection) -> StoreStats:
            with _sqlite_read(conn):
                blobs, blob_bytes = conn.execute(
                    "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs"
                ).fetchone()
                (nodes,) = conn.execute("SELECT count(*) FROM nodes").fetchone()
            return StoreStats(blobs, blob_bytes, nodes)

        return await self._run(work)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)


@contextlib.contextmanager
def _sqlite_write(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction taken with ``BEGIN IMMEDIATE``.

    A deferred transaction that reads and then writes fails at once with ``database is locked`` when another process
    wrote meanwhile (the busy timeout does not cover that upgrade); IMMEDIATE takes the write lock first, waiting up
    to the busy timeout for it.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        # Some errors (a full disk, an I/O error) already rolled the transaction back.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _sqlite_read(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: several statements see one snapshot of the file."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


# ---------------------------------------------------------------------------------------------------- PostgreSQL

_PG_SCHEMA_LOCK = 0x6167_656E_7473_7430  # "agentst0": the advisory lock that serializes schema creation
_PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS blobs (ref text PRIMARY KEY, data bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (head text PRIMARY KEY, parent text, message text NOT NULL)",
)


class _PostgresStore(ContentStore):
    """A store in a PostgreSQL database, shared by workers on any number of machines.

    The schema is created when the store is opened; concurrent openers take turns on an advisory lock, since two
    ``CREATE TABLE IF NOT EXISTS`` racing each other can still fail. Queries go through a pool of connections, opened
    on first use in the running event loop.

    Args:
        conninfo: The libpq connection URL, password included.
        url: The same URL without the password, for messages.
        max_connections: The pool's size.
    """

    def __init__(self, conninfo: str, url: str, *, max_connections: int = 4) -> None:
        self.url = url
        self._conninfo = conninfo
        self._max_connections = max_connections
        self._pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False
        self._create_schema()

    def _create_schema(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
                for statement in _PG_SCHEMA:
                    conn.execute(statement)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot set up the store at {self.url}: {exc}. Check that the server is up, that the database "
                f"exists and that the user may create tables in it, or point {STORE_ENV} elsewhere."
            ) from exc

    async def _get_pool(self) -> AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]]:
        if self._closed:
            raise StoreError(f"the store at {self.url} is closed; open it again with open_store()")
        async with self._pool_lock:
            if self._pool is None:
                from psycopg_pool import AsyncConnectionPool

                # check: a connection the server dropped (a restart, a failover) is replaced when taken from the
                # pool, instead of failing the activity attempt that drew it.
                pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
                    self._conninfo,
                    min_size=1,
                    max_size=self._max_connections,
                    open=False,
                    name="agent-runner-store",
                    check=AsyncConnectionPool.check_connection,
                )
                await pool.open(wait=True, timeout=30)
                self._pool = pool
            return self._pool

    async def _run(self, work: Callable[[AsyncConnection[tuple[Any, ...]]], Any]) -> Any:
        import psycopg
        import psycopg_pool

        pool = await self._get_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                return await work(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StoreError(f"the store at {self.url} failed: {exc}") from exc

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        _check_refs(self.url, blobs)
        batches: list[list[tuple[str, bytes]]] = [[]]
        size = 0
        for ref, data in blobs.items():
            if batches[-1] and size + len(data) > PUT_CHUNK_BYTES:
                batches.append([])
                size = 0
            batches[-1].append((ref, data))
            size += len(data)

        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> int:
            written: set[str] = set()
            for batch in batches:
                if not batch:
                    continue
                # %b sends the blobs in binary: as text they would go hex-escaped, at twice the size, and a 12 MB
                # put took 3x as long.
                cursor = await conn.execute(
                    "INSERT INTO blobs (ref, data) SELECT * FROM unnest(%s::text[], %b::bytea[]) "
                    "ON CONFLICT (ref) DO NOTHING RETURNING ref",
                    ([ref for ref, _ in batch], [data for _, data in batch]),
                )
                written.update(ref for (ref,) in await cursor.fetchall())
            return sum(len(blobs[ref]) for ref in written)

        result: int = await self._run(work)
        return result

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            # Binary results: bytea comes back as its bytes, not as hex text twice its size.
            async with conn.cursor(binary=True) as cursor:
                for chunk in _chunks(refs, GET_CHUNK):
                    await cursor.execute("SELECT ref, data FROM blobs WHERE ref = ANY(%s::text[])", (list(chunk),))
                    found.update((ref, bytes(data)) for ref, data in await cursor.fetchall())
            return found

        found: dict[str, bytes] = await self._run(work)
        return found

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> None:
            for chunk in _chunks(nodes, NODE_CHUNK):
                await conn.execute(
                    "INSERT INTO nodes (head, parent, message) "
                    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) ON CONFLICT (head) DO NOTHING",
                    ([n.head for n in chunk], [n.parent for n in chunk], [n.message for n in chunk]),
                )

        await self._run(work)

    async def chain(self, head: str) -> list[str]:
        sql = _CHAIN_SQL.format(p="%s", max_depth=MAX_CHAIN)

        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[tuple[str | None, str]]:
            cursor = await conn.execute(sql, (head,))
            return [(parent, message) for parent, message in await cursor.fetchall()]

        return _resolve_chain(self.url, head, await self._run(work))

    async def stats(self) -> StoreStats:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> StoreStats:
            cursor = await conn.execute(
                "SELECT (SELECT count(*) FROM blobs), (SELECT coalesce(sum(octet_length(data)), 0) FROM blobs), "
                "(SELECT count(*) FROM nodes)"
            )
            row = await cursor.fetchone()
            assert row is not None
            return StoreStats(int(row[0]), int(row[1]), int(row[2]))

        result: StoreStats = await self._run(work)
        return result

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


# ---------------------------------------------------------------------------------------------------- open_store


def default_store_path() -> Path:
    """Where the store lives when nothing says otherwise: ``$XDG_DATA_HOME/agent-runner/store.db``.

    ``XDG_DATA_HOME`` defaults to ``~/.local/share``; a relative value is ignored, as the XDG specification says.
    """
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "agent-runner" / "store.db"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def _sqlite_path(url: str) -> Path:
    rest = url.removeprefix("sqlite:")
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):
            raise StoreError(
                f"{url!r} is not a SQLite store URL: write sqlite:///absolute/path.db (three slashes) or "
                "sqlite:relative/path.db"
            )
    if not rest:
        raise StoreError(f"{url!r} names no file: write sqlite:///absolute/path.db or sqlite:relative/path.db")
    return Path(rest).expanduser()


def open_store(url: str | None = None) -> ContentStore:
    """Open the content store at ``url``, creating its schema if needed.

    Args:
        url: ``sqlite:///absolute/path.db``, ``sqlite:relative/path.db``, ``postgresql://user:pw@host:port/db``
            (or ``postgres://``), or ``memory:``. ``None`` reads ``AGENT_RUNNER_STORE``; if that is unset or empty,
            the SQLite file ``default_store_path()``, whose directory is created.

    Returns:
        The open store; ``close()`` it when done (or use it as ``async with``).

    Raises:
        StoreError: The URL's scheme is unknown, or the store cannot be opened.
    """
    if url is None:
        url = os.environ.get(STORE_ENV) or None
    if url is None:
        path = default_store_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {path.parent} for the default store: {exc}; set {STORE_ENV}") from exc
        return _SqliteStore(path, f"sqlite://{path}")
    if url.startswith("sqlite:"):
        return _SqliteStore(_sqlite_path(url), url)
    if url.startswith(("postgresql://", "postgres://")):
        return _PostgresStore(url, _without_password(url))
    if url == "memory:":
        return _MemoryStore()
    raise StoreError(
        f"unknown store URL {_without_password(url)!r}: use sqlite:///absolute/path.db, sqlite:relative/path.db, "
        f"postgresql://user:password@host:port/database (or postgres://...), or memory: (this process only). "
        f"Set it with {STORE_ENV}."
    )
