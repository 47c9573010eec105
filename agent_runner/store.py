"""The content-addressed store: message contents live here, workflow history carries only their references.

A blob's reference is ``"sha256:" + hexdigest`` of its bytes, or its short form (``~`` and 128 bits of the digest,
what runs since issue 14 store; ``ref_for``, ``names``), so writing is idempotent and a reference can never name two
contents: ``put`` refuses a blob under any other key, and ``get`` checks every blob it reads
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

**Encryption at rest.** With ``AGENT_RUNNER_ENCRYPTION_KEYS`` set (the payload codec's keys and rotation,
``agent_runner/codec.py``), ``open_store`` wraps the backend in a layer that stores every blob AES-GCM encrypted
under the current key (its key id stored with it, so older listed keys still read what they wrote) and files blobs
and chain nodes under ``hmac:`` addresses, an HMAC-SHA256 of the reference, instead of the reference itself: the
database holds neither content nor the ``sha256:`` references that workflow history carries. The references callers
use do not change, and every blob read is still decrypted and then checked against its reference. The HMAC key is
one random key per store, kept in its ``meta`` table wrapped (AES-GCM) under each encryption key that opened the
store, so addresses never change when keys rotate: the store adds a wrapping under a new current key when it is
opened with it, and an old key can be dropped once ``agent_runner/reseal.py`` sealed again under the current key
every blob and node it encrypted.

**Retention.** Every blob and node records when it was last written (``written_at``; putting what is already there
writes it again), so ``sweep`` can remove what no run references without touching what an activity stored a moment
ago; ``agent_runner/gc.py`` decides what is referenced.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import bisect
import contextlib
import hashlib
import hmac
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote_plus, urlsplit, urlunsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_runner.codec import KEYS_ENV, keys_from_env
from agent_runner.contract.errors import BlobCorrupted, BlobMissing, StoreError
from agent_runner.contract.transcript import is_short, names, next_head, ref_for

logger = logging.getLogger(__name__)

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
    "Reencrypted",
    "StoreStats",
    "Swept",
    "default_store_path",
    "open_store",
    "reencrypt",
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

RESEAL_HEAD_BYTES = 512
"""How much of a sealed blob ``reseal`` reads to learn its key: the format's header, a key id and the nonce."""

MAX_CHAIN = 1_000_000
"""Deepest chain ``chain()`` walks. Heads are the caller's hashes, so a cycle means a corrupt store; this bound turns
it into an error instead of a query that never ends."""

_T = TypeVar("_T")

LiveEntries = tuple[str, Sequence[bytes]]
"""A run's live events for ``ContentStore.commit``: its workflow id, and each event's JSON bytes."""


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


@dataclass(frozen=True)
class Swept:
    """What ``sweep`` removed (or, in a dry run, would remove).

    Attributes:
        blobs: Number of blobs.
        blob_bytes: Their total size in bytes, as stored (ciphertext in an encrypted store).
        nodes: Number of chain nodes.
    """

    blobs: int
    blob_bytes: int
    nodes: int


LIVE_READ_LIMIT = 1000
"""The most live events one ``read_live`` returns."""


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
        corrupted = [ref for ref in wanted if not names(ref, found[ref])]
        if corrupted:
            raise _corrupted_blobs(self.url, corrupted)
        return {ref: found[ref] for ref in wanted}

    @abc.abstractmethod
    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        """The blobs of ``refs`` (no duplicates) that the store holds, as stored; ``get`` checks them."""

    async def commit(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode] = (), live: LiveEntries | None = None
    ) -> int:
        """Store blobs, chain nodes and a run's live events at once: in one transaction where the backend has them.

        What an activity writes at its end (a reply, the transcripts it extends, its last live events) then costs
        one commit, one disk sync, instead of one per kind. Once it returns, all of it is stored, as after ``put``,
        ``put_nodes`` and ``append_live`` (this default calls them in that order).

        Args:
            blobs: Each blob by its reference, which must be ``ref_for(blob)``.
            nodes: Chain nodes whose messages are among ``blobs`` or already stored.
            live: A run's live events to add to its live log (``append_live``), as ``(run_id, entries)``.

        Returns:
            The number of blob bytes newly written.

        Raises:
            StoreError: A key is not the reference of its blob (nothing is written), or the store failed.
        """
        written = await self.put(blobs) if blobs else 0
        if nodes:
            await self.put_nodes(nodes)
        if live is not None and live[1]:
            await self.append_live(*live)
        return written

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

    async def clock(self) -> float:
        """The store's current time, in seconds since the epoch: the clock ``written_at`` is kept by.

        A PostgreSQL store reads the server's clock, so workers on machines whose clocks disagree stamp alike.
        """
        return time.time()

    async def sweep(
        self, keep_blobs: Set[str], keep_heads: Set[str], *, written_before: float, dry_run: bool = False
    ) -> Swept:
        """Remove every blob and chain node not kept that was last written before ``written_before``.

        Each removal checks ``written_before`` again as it deletes, so something written again meanwhile (an
        activity storing the same content) stays. Rows written by a version that did not record write times are
        stamped with the current time instead, so they are removed one retention period later at the soonest.

        Args:
            keep_blobs: References of blobs to keep.
            keep_heads: Heads of chain nodes to keep.
            written_before: A time of ``clock()``; only what was written before it can go.
            dry_run: Count what would go, and change nothing.

        Returns:
            What was removed, or would be.

        Raises:
            StoreError: The store cannot sweep (it is not one ``open_store`` opened), or failed.
        """
        del keep_blobs, keep_heads, written_before, dry_run  # the backends' signature: this store cannot use them
        raise StoreError(f"the store at {self.url} cannot be swept: open it with agent_runner.store.open_store()")

    async def append_live(self, run_id: str, entries: Sequence[bytes]) -> None:
        """Add a run's live events (``agent_runner/activities/live_events.py``) to its live log, in order.

        The live log is a side channel: what a model call streams reaches watchers through it rather than through
        workflow history. It is not durable content: nothing references it, a write is not synced to disk, and a
        sweep removes what is older than the retention. A store that keeps no live log ignores this (the default),
        and its watchers then see replies whole, without their streamed text.

        Args:
            run_id: The run's workflow id.
            entries: The events, each one JSON object's bytes.
        """
        del run_id, entries

    async def read_live(self, run_id: str, after: int = 0, *, limit: int = LIVE_READ_LIMIT) -> list[tuple[int, bytes]]:
        """A run's live events written after position ``after``, in order, at most ``limit`` of them.

        Returns:
            ``(position, entry)`` pairs; read on from the last position. Positions grow, but need not be consecutive.
        """
        del run_id, after, limit
        return []

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
    wrong = [key for key, data in blobs.items() if not names(key, data)]
    if wrong:
        shown = ", ".join(f"{key!r} (its content is {ref_for(blobs[key], is_short(key))})" for key in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        raise StoreError(
            f"refused to write to the store at {url}: {len(wrong)} key(s) are not the reference of their blob: "
            f"{shown}{more}. Key each blob by agent_runner.store.ref_for(blob)."
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


_MetaSetup = Callable[[str, Mapping[str, bytes], bool], Mapping[str, bytes]]
"""Called once when a store is opened, inside the transaction that sets up its schema: ``(url, meta rows, whether
the store holds anything)``; returns the meta rows to add, or raises ``StoreError`` to refuse the store."""

_ADDRESS_KEY = "address-key:"
"""Meta rows named so hold the store's HMAC address key, wrapped under the encryption key named after the colon."""
_KEY_SINCE = "key-since:"
"""Meta rows named so hold when the key named after the colon first opened the store as its current key (seconds
since the epoch, as text; kept after the key is dropped): ``reseal`` refuses to reseal under a key older than another
current key."""


def _plain_setup(url: str, meta: Mapping[str, bytes], has_content: bool) -> Mapping[str, bytes]:  # noqa: ARG001
    if any(name.startswith(_ADDRESS_KEY) for name in meta):
        raise StoreError(
            f"the store at {url} is encrypted: set {KEYS_ENV} to the keys it was written with (the workers' keys)"
        )
    return {}


class _Backend(ContentStore):
    """A store that keeps what it is given as is: ``put`` checks the references, ``_write`` stores the bytes.

    The encryption layer writes through ``_write`` under its own addresses, which are not references.
    """

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        _check_refs(self.url, blobs)
        written = await self._write(blobs)
        return sum(len(blobs[key]) for key in written)

    @abc.abstractmethod
    async def _write(self, blobs: Mapping[str, bytes]) -> list[str]:
        """Store ``blobs`` by key, unchecked; stamp those already there as written now; return the keys added."""

    async def commit(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode] = (), live: LiveEntries | None = None
    ) -> int:
        _check_refs(self.url, blobs)
        written = await self._write_all(blobs, nodes, live)
        return sum(len(blobs[key]) for key in written)

    async def _write_all(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode], live: LiveEntries | None
    ) -> list[str]:
        """``_write``, ``put_nodes`` and ``append_live`` (the encryption layer's way to ``commit``), one by one.

        A backend with transactions overrides this to make it one.
        """
        written = await self._write(blobs) if blobs else []
        if nodes:
            await self.put_nodes(nodes)
        if live is not None and live[1]:
            await self.append_live(*live)
        return written

    # What ``reencrypt`` needs: the rows stored before encryption was turned on, and their removal.

    @abc.abstractmethod
    async def _plaintext(self) -> tuple[list[str], list[ChainNode]]:
        """The blobs filed under their reference and the chain nodes filed under their head: unencrypted rows."""

    @abc.abstractmethod
    async def _remove_plaintext(self, refs: Sequence[str], heads: Sequence[str]) -> None:
        """Remove these unencrypted blobs and nodes, and every unencrypted live event."""

    @abc.abstractmethod
    async def _delete_meta(self, name: str) -> None:
        """Remove the meta row ``name``."""

    # What ``reseal`` (``agent_runner/reseal.py``) needs: the sealed rows page by page, and their replacement.

    @abc.abstractmethod
    async def _sealed_blob_heads(self, after: str, limit: int) -> list[tuple[str, bytes]]:
        """Up to ``limit`` sealed blobs filed after address ``after``, in order: each address and first bytes."""

    @abc.abstractmethod
    async def _sealed_node_page(self, after: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` sealed chain nodes filed after address ``after``, in order: each address and message."""

    @abc.abstractmethod
    async def _replace_sealed(
        self, blobs: Sequence[tuple[str, bytes, bytes]], nodes: Sequence[tuple[str, str, str]]
    ) -> int:
        """In one transaction, replace each row still as it was read; how many were replaced.

        Args:
            blobs: ``(address, the first bytes it had, its new bytes)``; its write time is kept.
            nodes: ``(address, the message it had, its new message)``; its write time is kept.
        """

    @abc.abstractmethod
    async def _live_not_under(self, header: bytes, *, remove: bool) -> int:
        """How many sealed live events do not begin with ``header`` (are under another key); removed with ``remove``."""

    async def _checkpoint(self) -> None:  # noqa: B027 - a backend without a log of its own has nothing to do
        """Let go of the old bytes of replaced rows where the backend keeps them aside (SQLite's write-ahead log)."""


# -------------------------------------------------------------------------------------------------------- memory


class _MemoryStore(_Backend):
    """A store in this process's memory, for tests and benchmarks. Nothing survives the process."""

    def __init__(self, setup: _MetaSetup = _plain_setup) -> None:
        self.url = "memory:"
        self._blobs: dict[str, bytes] = {}
        self._nodes: dict[str, tuple[str | None, str]] = {}
        self._written: dict[tuple[str, str], float] = {}
        self._meta = dict(setup(self.url, {}, False))
        self._live: dict[str, list[tuple[int, bytes, float]]] = {}
        self._live_seq = 0

    async def _write(self, blobs: Mapping[str, bytes]) -> list[str]:
        now = time.time()
        written = []
        for key, data in blobs.items():
            if key not in self._blobs:
                self._blobs[key] = bytes(data)
                written.append(key)
            self._written["blob", key] = now
        return written

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        return {ref: self._blobs[ref] for ref in refs if ref in self._blobs}

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        now = time.time()
        for node in nodes:
            self._nodes.setdefault(node.head, (node.parent, node.message))
            self._written["node", node.head] = now

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

    async def append_live(self, run_id: str, entries: Sequence[bytes]) -> None:
        log = self._live.setdefault(run_id, [])
        now = time.time()
        for entry in entries:
            self._live_seq += 1
            log.append((self._live_seq, bytes(entry), now))

    async def read_live(self, run_id: str, after: int = 0, *, limit: int = LIVE_READ_LIMIT) -> list[tuple[int, bytes]]:
        log = self._live.get(run_id, [])
        start = bisect.bisect_right(log, after, key=lambda row: row[0])
        return [(seq, data) for seq, data, _ in log[start : start + limit]]

    async def sweep(
        self, keep_blobs: Set[str], keep_heads: Set[str], *, written_before: float, dry_run: bool = False
    ) -> Swept:
        blobs = [k for k in self._blobs if k not in keep_blobs and self._written["blob", k] < written_before]
        heads = [h for h in self._nodes if h not in keep_heads and self._written["node", h] < written_before]
        swept = Swept(len(blobs), sum(len(self._blobs[k]) for k in blobs), len(heads))
        if not dry_run:
            for run_id, log in list(self._live.items()):
                kept = [row for row in log if row[2] >= written_before]
                if kept:
                    self._live[run_id] = kept
                else:
                    del self._live[run_id]
            for key in blobs:
                del self._blobs[key], self._written["blob", key]
            for head in heads:
                del self._nodes[head], self._written["node", head]
        return swept

    async def _plaintext(self) -> tuple[list[str], list[ChainNode]]:
        nodes = [ChainNode(h, p, m) for h, (p, m) in self._nodes.items() if not h.startswith(ADDRESS_PREFIX)]
        return [k for k in self._blobs if not k.startswith(ADDRESS_PREFIX)], nodes

    async def _remove_plaintext(self, refs: Sequence[str], heads: Sequence[str]) -> None:
        for key in refs:
            self._blobs.pop(key, None)
            self._written.pop(("blob", key), None)
        for head in heads:
            self._nodes.pop(head, None)
            self._written.pop(("node", head), None)
        for run_id in [r for r in self._live if not r.startswith(ADDRESS_PREFIX)]:
            del self._live[run_id]

    async def _delete_meta(self, name: str) -> None:
        self._meta.pop(name, None)

    async def _sealed_blob_heads(self, after: str, limit: int) -> list[tuple[str, bytes]]:
        keys = sorted(k for k in self._blobs if k > after and k.startswith(ADDRESS_PREFIX))[:limit]
        return [(key, self._blobs[key][:RESEAL_HEAD_BYTES]) for key in keys]

    async def _sealed_node_page(self, after: str, limit: int) -> list[tuple[str, str]]:
        heads = sorted(h for h in self._nodes if h > after and h.startswith(ADDRESS_PREFIX))[:limit]
        return [(head, self._nodes[head][1]) for head in heads]

    async def _replace_sealed(
        self, blobs: Sequence[tuple[str, bytes, bytes]], nodes: Sequence[tuple[str, str, str]]
    ) -> int:
        replaced = 0
        for key, old, new in blobs:
            if self._blobs.get(key, b"")[: len(old)] == old:
                self._blobs[key] = new
                replaced += 1
        for head, old_message, message in nodes:
            if head in self._nodes and self._nodes[head][1] == old_message:
                self._nodes[head] = (self._nodes[head][0], message)
                replaced += 1
        return replaced

    async def _live_not_under(self, header: bytes, *, remove: bool) -> int:
        count = 0
        for run_id in [r for r in self._live if r.startswith(ADDRESS_PREFIX)]:
            kept = [row for row in self._live[run_id] if row[1].startswith(header)]
            count += len(self._live[run_id]) - len(kept)
            if remove:
                self._live[run_id] = kept
        return count

    async def close(self) -> None:
        return None


# -------------------------------------------------------------------------------------------------------- SQLite

# blobs keeps its rowid: SQLite advises against WITHOUT ROWID for rows larger than a twentieth of a page, and blobs
# run to megabytes. nodes rows are small and only ever found by head, so they live in the key's own b-tree.
# written_at (seconds since the epoch) is NULL in rows written before it existed, or by a version that does not
# know it: files made before it get the column (ALTER TABLE ... ADD COLUMN), and such rows are kept until a sweep
# stamps them.
_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, data BLOB NOT NULL, written_at REAL)",
    "CREATE TABLE IF NOT EXISTS nodes (head TEXT PRIMARY KEY, parent TEXT, message TEXT NOT NULL, written_at REAL) "
    "WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    # Live events (``append_live``): ``seq`` orders them across every process that writes the file.
    "CREATE TABLE IF NOT EXISTS live (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
    "data BLOB NOT NULL, written_at REAL NOT NULL)",
)
_SQLITE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS live_run ON live (run_id, seq)",
    "CREATE INDEX IF NOT EXISTS live_written_at ON live (written_at)",
    "CREATE INDEX IF NOT EXISTS blobs_written_at ON blobs (written_at)",
    "CREATE INDEX IF NOT EXISTS nodes_written_at ON nodes (written_at)",
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


class _SqliteStore(_Backend):
    """A store in one SQLite file, shared by every process on the machine that opens it.

    The file is in WAL mode (readers never wait for the writer) with a busy timeout, and each write is one
    ``BEGIN IMMEDIATE`` transaction, so several worker processes can write at once: they take turns instead of
    failing with ``database is locked``.

    Args:
        path: The database file; created, with its schema, if missing.
        url: The URL it was opened by, for messages.
        busy_timeout_ms: How long a write waits for another process's write to finish.
    """

    def __init__(
        self, path: Path, url: str, *, busy_timeout_ms: int = 30_000, setup: _MetaSetup = _plain_setup
    ) -> None:
        self.url = url
        self.path = path
        # The stdlib driver on one thread of our own rather than aiosqlite: aiosqlite does the same (a thread per
        # connection) plus a dependency. One thread owns the connection, so no lock is needed around it, and the
        # event loop never waits on disk or on another process's write lock.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-runner-store")
        try:
            self._conn = self._executor.submit(self._connect, busy_timeout_ms, setup).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self._closed = False

    def _connect(self, busy_timeout_ms: int, setup: _MetaSetup) -> sqlite3.Connection:
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
            _switch_to_wal(conn, deadline=time.monotonic() + busy_timeout_ms / 1000)
            # FULL, not NORMAL: once put() returns, the reference goes into workflow history, and a power cut must
            # not leave history naming a blob the file lost.
            conn.execute("PRAGMA synchronous = FULL")
            with _sqlite_write(conn):
                for statement in _SQLITE_SCHEMA:
                    conn.execute(statement)
                for table in ("blobs", "nodes"):
                    if "written_at" not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN written_at REAL")
                for statement in _SQLITE_INDEXES:
                    conn.execute(statement)
                meta = dict(conn.execute("SELECT name, value FROM meta"))
                (has_content,) = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM blobs) OR EXISTS (SELECT 1 FROM nodes)"
                ).fetchone()
                conn.executemany(
                    "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                    list(setup(self.url, meta, bool(has_content)).items()),
                )
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot set up the store at {self.url}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise StoreError(f"the store at {self.url} is closed; open it again with open_store()")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, work, self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"the store at {self.url} failed: {exc}") from exc

    async def _write(self, blobs: Mapping[str, bytes]) -> list[str]:
        items = list(blobs.items())

        def work(conn: sqlite3.Connection) -> list[str]:
            with _sqlite_write(conn):
                return _sqlite_put_blobs(conn, items, time.time())

        return await self._run(work)

    async def _write_all(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode], live: LiveEntries | None
    ) -> list[str]:
        items = list(blobs.items())
        rows = [] if live is None else [(live[0], bytes(entry)) for entry in live[1]]

        def work(conn: sqlite3.Connection) -> list[str]:
            # One transaction, so one sync (synchronous=FULL) for all of it; the live events are synced with the
            # rest, which costs nothing more.
            with _sqlite_write(conn):
                now = time.time()
                written = _sqlite_put_blobs(conn, items, now)
                _sqlite_put_nodes(conn, nodes, now)
                _sqlite_append_live(conn, rows, now)
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
        def work(conn: sqlite3.Connection) -> None:
            with _sqlite_write(conn):
                _sqlite_put_nodes(conn, nodes, time.time())

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

    async def append_live(self, run_id: str, entries: Sequence[bytes]) -> None:
        rows = [(run_id, bytes(entry)) for entry in entries]

        def work(conn: sqlite3.Connection) -> None:
            # Not synced: a live event is a preview, and the reply it previews is stored (and synced) on its own.
            conn.execute("PRAGMA synchronous = OFF")
            try:
                with _sqlite_write(conn):
                    _sqlite_append_live(conn, rows, time.time())
            finally:
                conn.execute("PRAGMA synchronous = FULL")

        await self._run(work)

    async def read_live(self, run_id: str, after: int = 0, *, limit: int = LIVE_READ_LIMIT) -> list[tuple[int, bytes]]:
        def work(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
            return conn.execute(
                "SELECT seq, data FROM live WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?", (run_id, after, limit)
            ).fetchall()

        return await self._run(work)

    async def sweep(
        self, keep_blobs: Set[str], keep_heads: Set[str], *, written_before: float, dry_run: bool = False
    ) -> Swept:
        def work(conn: sqlite3.Connection) -> Swept:
            with _sqlite_read(conn):
                blobs = [
                    (key, size)
                    for key, size in conn.execute(
                        "SELECT ref, length(data) FROM blobs WHERE written_at < ?", (written_before,)
                    )
                    if key not in keep_blobs
                ]
                heads = [
                    head
                    for (head,) in conn.execute("SELECT head FROM nodes WHERE written_at < ?", (written_before,))
                    if head not in keep_heads
                ]
            if dry_run:
                return Swept(len(blobs), sum(size for _, size in blobs), len(heads))
            # After the list: rows without a time are not in it, and from now on their time says when they were
            # first seen, so they go one window later at the soonest.
            with _sqlite_write(conn):
                now = time.time()
                for table in ("blobs", "nodes"):
                    conn.execute(f"UPDATE {table} SET written_at = ? WHERE written_at IS NULL", (now,))
                conn.execute("DELETE FROM live WHERE written_at < ?", (written_before,))
            removed, removed_bytes, removed_nodes = 0, 0, 0
            # Short transactions, so workers' writes wait for one chunk at most; each deletes only what is still
            # old (an activity may have stored the same content again since the list was made).
            for chunk in _chunks([key for key, _ in blobs], GET_CHUNK):
                marks = ", ".join("?" * len(chunk))
                with _sqlite_write(conn):
                    sizes = conn.execute(
                        f"SELECT length(data) FROM blobs WHERE ref IN ({marks}) AND written_at < ?",
                        [*chunk, written_before],
                    ).fetchall()
                    conn.execute(
                        f"DELETE FROM blobs WHERE ref IN ({marks}) AND written_at < ?", [*chunk, written_before]
                    )
                removed += len(sizes)
                removed_bytes += sum(size for (size,) in sizes)
            for chunk in _chunks(heads, GET_CHUNK):
                marks = ", ".join("?" * len(chunk))
                with _sqlite_write(conn):
                    cursor = conn.execute(
                        f"DELETE FROM nodes WHERE head IN ({marks}) AND written_at < ?", [*chunk, written_before]
                    )
                removed_nodes += cursor.rowcount
            return Swept(removed, removed_bytes, removed_nodes)

        return await self._run(work)

    async def _plaintext(self) -> tuple[list[str], list[ChainNode]]:
        def work(conn: sqlite3.Connection) -> tuple[list[str], list[ChainNode]]:
            with _sqlite_read(conn):
                refs = [ref for (ref,) in conn.execute("SELECT ref FROM blobs WHERE ref NOT LIKE 'hmac:%'")]
                nodes = [
                    ChainNode(head, parent, message)
                    for head, parent, message in conn.execute(
                        "SELECT head, parent, message FROM nodes WHERE head NOT LIKE 'hmac:%'"
                    )
                ]
            return refs, nodes

        return await self._run(work)

    async def _remove_plaintext(self, refs: Sequence[str], heads: Sequence[str]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            # Overwritten, not only unlinked: a removed row's bytes would otherwise stay readable in free pages,
            # and in the write-ahead log until it is checkpointed.
            conn.execute("PRAGMA secure_delete = ON")
            try:
                for table, column, keys in (("blobs", "ref", refs), ("nodes", "head", heads)):
                    for chunk in _chunks(keys, GET_CHUNK):  # short transactions: workers' writes wait for one at most
                        marks = ", ".join("?" * len(chunk))
                        with _sqlite_write(conn):
                            conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", chunk)
                with _sqlite_write(conn):
                    conn.execute("DELETE FROM live WHERE run_id NOT LIKE 'hmac:%'")
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await self._run(work)

    async def _delete_meta(self, name: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            with _sqlite_write(conn):
                conn.execute("DELETE FROM meta WHERE name = ?", (name,))

        await self._run(work)

    async def _sealed_blob_heads(self, after: str, limit: int) -> list[tuple[str, bytes]]:
        def work(conn: sqlite3.Connection) -> list[tuple[str, bytes]]:
            return conn.execute(
                "SELECT ref, substr(data, 1, ?) FROM blobs WHERE ref > ? AND ref LIKE 'hmac:%' ORDER BY ref LIMIT ?",
                (RESEAL_HEAD_BYTES, after, limit),
            ).fetchall()

        return await self._run(work)

    async def _sealed_node_page(self, after: str, limit: int) -> list[tuple[str, str]]:
        def work(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            return conn.execute(
                "SELECT head, message FROM nodes WHERE head > ? AND head LIKE 'hmac:%' ORDER BY head LIMIT ?",
                (after, limit),
            ).fetchall()

        return await self._run(work)

    async def _replace_sealed(
        self, blobs: Sequence[tuple[str, bytes, bytes]], nodes: Sequence[tuple[str, str, str]]
    ) -> int:
        def work(conn: sqlite3.Connection) -> int:
            # Overwritten, not only unlinked: the old ciphertext is what a leaked key reads.
            conn.execute("PRAGMA secure_delete = ON")
            try:
                with _sqlite_write(conn):
                    replaced = 0
                    for key, old, new in blobs:
                        replaced += conn.execute(
                            "UPDATE blobs SET data = ? WHERE ref = ? AND substr(data, 1, ?) = ?",
                            (new, key, len(old), old),
                        ).rowcount
                    for head, old_message, message in nodes:
                        replaced += conn.execute(
                            "UPDATE nodes SET message = ? WHERE head = ? AND message = ?", (message, head, old_message)
                        ).rowcount
                return replaced
            finally:
                conn.execute("PRAGMA secure_delete = OFF")

        return await self._run(work)

    async def _live_not_under(self, header: bytes, *, remove: bool) -> int:
        where = "FROM live WHERE run_id LIKE 'hmac:%' AND substr(data, 1, ?) != ?"

        def work(conn: sqlite3.Connection) -> int:
            if not remove:
                (count,) = conn.execute(f"SELECT count(*) {where}", (len(header), header)).fetchone()
                return int(count)
            with _sqlite_write(conn):
                return conn.execute(f"DELETE {where}", (len(header), header)).rowcount

        return await self._run(work)

    async def _checkpoint(self) -> None:
        """Move the write-ahead log into the file and empty it: replaced rows' old bytes then leave the log too."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await self._run(work)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)


def _sqlite_put_blobs(conn: sqlite3.Connection, items: Sequence[tuple[str, bytes]], now: float) -> list[str]:
    """Insert blobs (in a write transaction); stamp those already there as written ``now``; the keys added."""
    written = []
    for key, data in items:
        cursor = conn.execute(
            "INSERT INTO blobs (ref, data, written_at) VALUES (?, ?, ?) ON CONFLICT (ref) DO NOTHING", (key, data, now)
        )
        if cursor.rowcount == 1:
            written.append(key)
        else:
            # Not an upsert: that would rewrite the blob's bytes too, and blobs run to megabytes.
            conn.execute("UPDATE blobs SET written_at = ? WHERE ref = ?", (now, key))
    return written


def _sqlite_put_nodes(conn: sqlite3.Connection, nodes: Sequence[ChainNode], now: float) -> None:
    """Insert chain nodes (in a write transaction); stamp those already there as written ``now``."""
    conn.executemany(
        "INSERT INTO nodes (head, parent, message, written_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (head) DO UPDATE SET written_at = excluded.written_at",
        [(node.head, node.parent, node.message, now) for node in nodes],
    )


def _sqlite_append_live(conn: sqlite3.Connection, rows: Sequence[tuple[str, bytes]], now: float) -> None:
    """Add ``(run_id, entry)`` rows to the live log (in a write transaction)."""
    conn.executemany("INSERT INTO live (run_id, data, written_at) VALUES (?, ?, ?)", [(*row, now) for row in rows])


def _switch_to_wal(conn: sqlite3.Connection, *, deadline: float) -> None:
    """Puts the file in WAL mode, waiting up to ``deadline`` for other processes that are setting it up too.

    The switch needs every other connection's lock released, and when two openers each hold a shared lock and both
    want the file to themselves, SQLite breaks the deadlock by failing one of them with ``database is locked`` at once,
    without the busy timeout. Workers started together on a new store file meet exactly that, so the switch is tried
    again until the busy timeout is spent.
    """
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


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
# As in SQLite, written_at is added to tables made before it and NULL in rows written without it.
_PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS blobs (ref text PRIMARY KEY, data bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (head text PRIMARY KEY, parent text, message text NOT NULL)",
    "ALTER TABLE blobs ADD COLUMN IF NOT EXISTS written_at double precision",
    "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS written_at double precision",
    "CREATE INDEX IF NOT EXISTS blobs_written_at ON blobs (written_at)",
    "CREATE INDEX IF NOT EXISTS nodes_written_at ON nodes (written_at)",
    "CREATE TABLE IF NOT EXISTS meta (name text PRIMARY KEY, value bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS live (seq bigserial PRIMARY KEY, run_id text NOT NULL, data bytea NOT NULL, "
    "written_at double precision NOT NULL)",
    "CREATE INDEX IF NOT EXISTS live_run ON live (run_id, seq)",
    "CREATE INDEX IF NOT EXISTS live_written_at ON live (written_at)",
)
_PG_NOW = "extract(epoch from clock_timestamp())::float8"
"""The server's clock: workers on several machines stamp ``written_at`` by one clock."""


class _PostgresStore(_Backend):
    """A store in a PostgreSQL database, shared by workers on any number of machines.

    The schema is created when the store is opened; concurrent openers take turns on an advisory lock, since two
    ``CREATE TABLE IF NOT EXISTS`` racing each other can still fail. Queries go through a pool of connections, opened
    on first use in the running event loop.

    Args:
        conninfo: The libpq connection URL, password included.
        url: The same URL as it may be shown (``redact_store_url``), for messages.
        max_connections: The pool's size.
        setup: Checks the store's meta rows when it is opened (encrypted or not) and adds any.
    """

    def __init__(self, conninfo: str, url: str, *, max_connections: int = 4, setup: _MetaSetup = _plain_setup) -> None:
        self.url = url
        self._conninfo = conninfo
        self._max_connections = max_connections
        self._pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False
        self._create_schema(setup)

    def _create_schema(self, setup: _MetaSetup) -> None:
        import psycopg

        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
                for statement in _PG_SCHEMA:
                    conn.execute(statement)
                meta = {name: bytes(value) for name, value in conn.execute("SELECT name, value FROM meta")}
                row = conn.execute("SELECT EXISTS (SELECT 1 FROM blobs) OR EXISTS (SELECT 1 FROM nodes)").fetchone()
                for name, value in setup(self.url, meta, bool(row and row[0])).items():
                    conn.execute(
                        "INSERT INTO meta (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING", (name, value)
                    )
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot set up the store at {self.url}: {_scrubbed(str(exc), self._conninfo)}. Check that the "
                "server is up, that the database exists and that the user may create tables in it, or point "
                f"{STORE_ENV} elsewhere."
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
            raise StoreError(f"the store at {self.url} failed: {_scrubbed(str(exc), self._conninfo)}") from exc

    async def _write(self, blobs: Mapping[str, bytes]) -> list[str]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[str]:
            return await _pg_put_blobs(conn, blobs)

        result: list[str] = await self._run(work)
        return result

    async def _write_all(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode], live: LiveEntries | None
    ) -> list[str]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[str]:
            # One transaction, one flush at its commit; the live events are flushed with the rest.
            written = await _pg_put_blobs(conn, blobs)
            await _pg_put_nodes(conn, nodes)
            if live is not None and live[1]:
                await _pg_append_live(conn, live[0], live[1])
            return written

        result: list[str] = await self._run(work)
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
            await _pg_put_nodes(conn, nodes)

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

    async def clock(self) -> float:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> float:
            row = await (await conn.execute(f"SELECT {_PG_NOW}")).fetchone()
            assert row is not None
            return float(row[0])

        result: float = await self._run(work)
        return result

    async def append_live(self, run_id: str, entries: Sequence[bytes]) -> None:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> None:
            # Not waited on a disk flush: a live event is a preview, its reply is stored (and flushed) on its own.
            await conn.execute("SET LOCAL synchronous_commit = off")
            await _pg_append_live(conn, run_id, entries)

        await self._run(work)

    async def read_live(self, run_id: str, after: int = 0, *, limit: int = LIVE_READ_LIMIT) -> list[tuple[int, bytes]]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[tuple[int, bytes]]:
            cursor = await conn.execute(
                "SELECT seq, data FROM live WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                (run_id, after, limit),
            )
            return [(int(seq), bytes(data)) for seq, data in await cursor.fetchall()]

        result: list[tuple[int, bytes]] = await self._run(work)
        return result

    async def sweep(
        self, keep_blobs: Set[str], keep_heads: Set[str], *, written_before: float, dry_run: bool = False
    ) -> Swept:
        async def candidates(conn: AsyncConnection[tuple[Any, ...]]) -> tuple[list[tuple[str, int]], list[str]]:
            # octet_length reads a stored value's size from its TOAST pointer, not the value.
            cursor = await conn.execute(
                "SELECT ref, octet_length(data) FROM blobs WHERE written_at < %s", (written_before,)
            )
            blobs = [(key, int(size)) for key, size in await cursor.fetchall() if key not in keep_blobs]
            cursor = await conn.execute("SELECT head FROM nodes WHERE written_at < %s", (written_before,))
            heads = [head for (head,) in await cursor.fetchall() if head not in keep_heads]
            if not dry_run:
                # After the list, as in SQLite: rows without a time go one window after they are first seen.
                for table in ("blobs", "nodes"):
                    await conn.execute(f"UPDATE {table} SET written_at = {_PG_NOW} WHERE written_at IS NULL")
                await conn.execute("DELETE FROM live WHERE written_at < %s", (written_before,))
            return blobs, heads

        found: tuple[list[tuple[str, int]], list[str]] = await self._run(candidates)
        blobs, heads = found
        if dry_run:
            return Swept(len(blobs), sum(size for _, size in blobs), len(heads))
        removed, removed_bytes, removed_nodes = 0, 0, 0
        for chunk in _chunks([key for key, _ in blobs], GET_CHUNK):

            async def delete_blobs(conn: AsyncConnection[tuple[Any, ...]], chunk: Sequence[str] = chunk) -> list[int]:
                # The row lock an upsert takes makes this wait for it, then see its new written_at and keep the row.
                cursor = await conn.execute(
                    "DELETE FROM blobs WHERE ref = ANY(%s::text[]) AND written_at < %s RETURNING octet_length(data)",
                    (list(chunk), written_before),
                )
                return [int(size) for (size,) in await cursor.fetchall()]

            sizes: list[int] = await self._run(delete_blobs)
            removed += len(sizes)
            removed_bytes += sum(sizes)
        for chunk in _chunks(heads, GET_CHUNK):

            async def delete_nodes(conn: AsyncConnection[tuple[Any, ...]], chunk: Sequence[str] = chunk) -> int:
                cursor = await conn.execute(
                    "DELETE FROM nodes WHERE head = ANY(%s::text[]) AND written_at < %s", (list(chunk), written_before)
                )
                return cursor.rowcount

            count: int = await self._run(delete_nodes)
            removed_nodes += count
        return Swept(removed, removed_bytes, removed_nodes)

    async def _plaintext(self) -> tuple[list[str], list[ChainNode]]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> tuple[list[str], list[ChainNode]]:
            cursor = await conn.execute("SELECT ref FROM blobs WHERE ref NOT LIKE %s", (ADDRESS_PREFIX + "%",))
            refs = [str(ref) for (ref,) in await cursor.fetchall()]
            cursor = await conn.execute(
                "SELECT head, parent, message FROM nodes WHERE head NOT LIKE %s", (ADDRESS_PREFIX + "%",)
            )
            return refs, [ChainNode(head, parent, message) for head, parent, message in await cursor.fetchall()]

        found: tuple[list[str], list[ChainNode]] = await self._run(work)
        return found

    async def _remove_plaintext(self, refs: Sequence[str], heads: Sequence[str]) -> None:
        for table, column, keys in (("blobs", "ref", refs), ("nodes", "head", heads)):
            for chunk in _chunks(keys, GET_CHUNK):

                async def delete(
                    conn: AsyncConnection[tuple[Any, ...]],
                    chunk: Sequence[str] = chunk,
                    table: str = table,
                    column: str = column,
                ) -> None:
                    await conn.execute(f"DELETE FROM {table} WHERE {column} = ANY(%s::text[])", (list(chunk),))

                await self._run(delete)

        async def live(conn: AsyncConnection[tuple[Any, ...]]) -> None:
            await conn.execute("DELETE FROM live WHERE run_id NOT LIKE %s", (ADDRESS_PREFIX + "%",))

        await self._run(live)

    async def _delete_meta(self, name: str) -> None:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> None:
            await conn.execute("DELETE FROM meta WHERE name = %s", (name,))

        await self._run(work)

    async def _sealed_blob_heads(self, after: str, limit: int) -> list[tuple[str, bytes]]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[tuple[str, bytes]]:
            # substring of a value kept out of line (TOAST) reads only the slice it needs.
            cursor = await conn.execute(
                "SELECT ref, substring(data from 1 for %s) FROM blobs WHERE ref > %s AND ref LIKE 'hmac:%%' "
                "ORDER BY ref LIMIT %s",
                (RESEAL_HEAD_BYTES, after, limit),
            )
            return [(str(ref), bytes(head)) for ref, head in await cursor.fetchall()]

        found: list[tuple[str, bytes]] = await self._run(work)
        return found

    async def _sealed_node_page(self, after: str, limit: int) -> list[tuple[str, str]]:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> list[tuple[str, str]]:
            cursor = await conn.execute(
                "SELECT head, message FROM nodes WHERE head > %s AND head LIKE 'hmac:%%' ORDER BY head LIMIT %s",
                (after, limit),
            )
            return [(str(head), str(message)) for head, message in await cursor.fetchall()]

        found: list[tuple[str, str]] = await self._run(work)
        return found

    async def _replace_sealed(
        self, blobs: Sequence[tuple[str, bytes, bytes]], nodes: Sequence[tuple[str, str, str]]
    ) -> int:
        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> int:
            replaced = 0
            for key, old, new in blobs:
                cursor = await conn.execute(
                    "UPDATE blobs SET data = %b WHERE ref = %s AND substring(data from 1 for %s) = %b",
                    (new, key, len(old), old),
                )
                replaced += cursor.rowcount
            for head, old_message, message in nodes:
                cursor = await conn.execute(
                    "UPDATE nodes SET message = %s WHERE head = %s AND message = %s", (message, head, old_message)
                )
                replaced += cursor.rowcount
            return replaced

        count: int = await self._run(work)
        return count

    async def _live_not_under(self, header: bytes, *, remove: bool) -> int:
        where = "FROM live WHERE run_id LIKE 'hmac:%%' AND substring(data from 1 for %s) != %b"

        async def work(conn: AsyncConnection[tuple[Any, ...]]) -> int:
            if not remove:
                row = await (await conn.execute(f"SELECT count(*) {where}", (len(header), header))).fetchone()
                return int(row[0]) if row else 0
            return (await conn.execute(f"DELETE {where}", (len(header), header))).rowcount

        count: int = await self._run(work)
        return count

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


async def _pg_put_blobs(conn: AsyncConnection[tuple[Any, ...]], blobs: Mapping[str, bytes]) -> list[str]:
    """Insert blobs (in the transaction); stamp those already there as written now; the keys added."""
    batches: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for ref, data in blobs.items():
        if batches[-1] and size + len(data) > PUT_CHUNK_BYTES:
            batches.append([])
            size = 0
        batches[-1].append((ref, data))
        size += len(data)
    written: list[str] = []
    for batch in batches:
        if not batch:
            continue
        # %b sends the blobs in binary: as text they would go hex-escaped, at twice the size, and a 12 MB put took
        # 3x as long. A blob already there gets a new written_at only: its bytes, kept out of line (TOAST), are not
        # rewritten. xmax = 0 tells a new row from an updated one.
        cursor = await conn.execute(
            f"INSERT INTO blobs (ref, data, written_at) SELECT ref, data, {_PG_NOW} "
            "FROM unnest(%s::text[], %b::bytea[]) AS new (ref, data) "
            "ON CONFLICT (ref) DO UPDATE SET written_at = excluded.written_at RETURNING ref, xmax = 0",
            ([key for key, _ in batch], [data for _, data in batch]),
        )
        written.extend(key for key, inserted in await cursor.fetchall() if inserted)
    return written


async def _pg_put_nodes(conn: AsyncConnection[tuple[Any, ...]], nodes: Sequence[ChainNode]) -> None:
    """Insert chain nodes (in the transaction); stamp those already there as written now."""
    # One row per head: an upsert may not touch a row twice in one statement.
    unique = list({node.head: node for node in reversed(nodes)}.values())
    for chunk in _chunks(unique, NODE_CHUNK):
        await conn.execute(
            f"INSERT INTO nodes (head, parent, message, written_at) SELECT head, parent, message, {_PG_NOW} "
            "FROM unnest(%s::text[], %s::text[], %s::text[]) AS new (head, parent, message) "
            "ON CONFLICT (head) DO UPDATE SET written_at = excluded.written_at",
            ([n.head for n in chunk], [n.parent for n in chunk], [n.message for n in chunk]),
        )


async def _pg_append_live(conn: AsyncConnection[tuple[Any, ...]], run_id: str, entries: Sequence[bytes]) -> None:
    """Add a run's live events to its live log (in the transaction)."""
    # A sequence allots seq in commit order only roughly: a reader may see a later seq before an earlier one commits,
    # so writers of one run (one attempt at a time) take a transaction-scoped lock on it.
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (run_id,))
    async with conn.cursor() as cursor:
        await cursor.executemany(
            f"INSERT INTO live (run_id, data, written_at) VALUES (%s, %s, {_PG_NOW})",
            [(run_id, bytes(entry)) for entry in entries],
        )


# ---------------------------------------------------------------------------------------------------- encryption

_SEALED = b"AR1"
"""The first bytes of every sealed value: a format version, then the key id's length (2 bytes), the key id, the
nonce and the AES-GCM ciphertext."""
_SEALED_TEXT = "AR1:"
_NONCE_BYTES = 12
_TAG_BYTES = 16
_WRAP_AAD = b"agent-runner store address key"
_NODE_AAD = b"agent-runner chain node"
_LIVE_AAD = b"live:"
"""Prefix of a run's live log: its address is the HMAC of this and the run id, each event sealed with both."""
ADDRESS_PREFIX = "hmac:"
"""How an encrypted store's addresses start: ``hmac:`` and the hex HMAC-SHA256 of the reference."""
PLAINTEXT_PENDING = "plaintext-pending"
"""The meta row of an encrypted store that may still hold content written before it was encrypted (``reencrypt``
adds it, and removes it once none is left): its readers then look for content in both forms."""


class _StoreCipher:
    """The keys of an encrypted store: AES-GCM for what it holds, HMAC for where it is filed.

    Args:
        keys: Key id to raw key, current first (``agent_runner.codec.keys_from_env``).
    """

    def __init__(self, keys: Mapping[str, bytes], *, adopt_plaintext: bool = False, newest: bool = False) -> None:
        self._keys = dict(keys)
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._current = next(iter(keys))
        self._address_key = b""
        self._adopt_plaintext = adopt_plaintext
        self._newest = newest
        self.wrapped: set[str] = set()
        """The ids of the keys the store's address key was wrapped under when it was opened."""
        self.plaintext = False
        """Whether the store may still hold content written before it was encrypted (``reencrypt``)."""

    def setup(self, url: str, meta: Mapping[str, bytes], has_content: bool) -> Mapping[str, bytes]:
        """Find the store's address key (or make one for a new store); wrap it under the current key if need be."""
        wrapped = {
            name.removeprefix(_ADDRESS_KEY): value for name, value in meta.items() if name.startswith(_ADDRESS_KEY)
        }
        self.plaintext = PLAINTEXT_PENDING in meta
        self.wrapped = set(wrapped)
        added: dict[str, bytes] = {}
        if not wrapped:
            if has_content and not self._adopt_plaintext:
                raise StoreError(
                    f"the store at {url} holds unencrypted content: encrypt it in place with `agent-runner store "
                    f"reencrypt` ({KEYS_ENV} set; runs may go on meanwhile), unset {KEYS_ENV} to use it as it is, "
                    f"or point {STORE_ENV} at a new store"
                )
            if has_content:  # reencrypt adopts it: until it is done, readers look for content in both forms
                self.plaintext = True
                added[PLAINTEXT_PENDING] = b"1"
            self._address_key = os.urandom(32)
        else:
            for key_id, value in wrapped.items():
                cipher = self._ciphers.get(key_id)
                if cipher is None:
                    continue
                try:
                    self._address_key = cipher.decrypt(value[:_NONCE_BYTES], value[_NONCE_BYTES:], _WRAP_AAD)
                    break
                except InvalidTag:
                    continue
            else:
                ids = ", ".join(repr(key_id) for key_id in sorted(wrapped))
                raise StoreError(
                    f"the store at {url} is encrypted with key {ids}, and {KEYS_ENV} holds none that opens it: set "
                    f"{KEYS_ENV} to the keys it was written with (the workers' keys)"
                )
        behind = self._behind(url, meta)
        if behind is not None:
            if self._newest:
                raise StoreError(behind)
            # A worker or client still starts (a deployment rolled back mid-rotation must not stop the fleet), but
            # what it writes is sealed with the older key, which the rotation meant to retire.
            logger.warning("%s; until then, what this process writes is sealed with the older key", behind)
        if self._current in wrapped:
            return added
        # A rotation: the new key wraps the address key too, so the old one can go once nothing needs it.
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._ciphers[self._current].encrypt(nonce, self._address_key, _WRAP_AAD)
        since = repr(time.time()).encode()
        return {**added, _ADDRESS_KEY + self._current: sealed, _KEY_SINCE + self._current: since}

    def _behind(self, url: str, meta: Mapping[str, bytes]) -> str | None:
        """What is wrong when the keys' first is not the store's newest current key (listed in the wrong order)."""
        since = {name.removeprefix(_KEY_SINCE): float(v) for name, v in meta.items() if name.startswith(_KEY_SINCE)}
        if self._current not in since and _ADDRESS_KEY + self._current not in meta:
            return None  # a new key: it becomes the newest now
        mine = since.get(self._current, 0.0)  # wrapped before write times were kept: older than any that has one
        newer = sorted((when, key_id) for key_id, when in since.items() if when > mine)
        if not newer:
            return None
        newest = newer[-1][1]
        return (
            f"the first key of {KEYS_ENV}, {self._current!r}, is not the current key of the store at {url}: "
            f"processes opened it with {newest!r} first since. List the workers' current key first ({newest!r}, "
            f"then the older ones), or, to go back to {self._current!r}, make a new key instead (`python -m "
            "agent_runner.codec new-key`) and list it first"
        )

    @property
    def current(self) -> str:
        """The id of the key that seals what is written."""
        return self._current

    def key_ids(self) -> list[str]:
        """Every key id, current first."""
        return list(self._keys)

    def header(self, key_id: str) -> bytes:
        """How every value sealed under ``key_id`` begins."""
        encoded = key_id.encode()
        return _SEALED + len(encoded).to_bytes(2, "big") + encoded

    def address(self, ref: str) -> str:
        """Where ``ref`` is filed: guessing it needs the address key, so the store does not reveal references."""
        return ADDRESS_PREFIX + hmac.new(self._address_key, ref.encode(), hashlib.sha256).hexdigest()

    def seal(self, data: bytes, aad: bytes) -> bytes:
        """``data`` encrypted under the current key, naming that key."""
        nonce = os.urandom(_NONCE_BYTES)
        return self.header(self._current) + nonce + self._ciphers[self._current].encrypt(nonce, data, aad)

    def open(self, url: str, sealed: bytes, aad: bytes, what: str) -> bytes | None:
        """``sealed`` decrypted, or ``None`` if it does not decrypt (it changed, or is not ours).

        Raises:
            StoreError: It names a key ``AGENT_RUNNER_ENCRYPTION_KEYS`` does not hold.
        """
        found = self._key_of(
            sealed,
            lambda key_id: (
                f"the store at {url} holds {what} encrypted with key {key_id!r}, which {KEYS_ENV} does not "
                "hold: add that key back (after the current one)"
            ),
        )
        if found is None:
            return None
        key_id, nonce, body = found
        try:
            return self._ciphers[key_id].decrypt(nonce, body, aad)
        except InvalidTag:
            return None

    def _key_of(self, sealed: bytes, missing: Callable[[str], str]) -> tuple[str, bytes, bytes] | None:
        """The id of the key ``sealed`` names, its nonce and the rest; ``None`` if it is not a sealed value.

        Raises:
            StoreError: It names a key we do not hold; ``missing(key_id)`` is its message (each caller says what).
        """
        parsed = sealed_key_id(sealed)
        if parsed is None:
            return None
        key_id, end = parsed
        if key_id not in self._keys:
            raise StoreError(missing(key_id))
        return key_id, sealed[end : end + _NONCE_BYTES], sealed[end + _NONCE_BYTES :]

    def seal_node(self, message: str) -> str:
        """A chain node's message reference, sealed as the ``message`` column holds it."""
        return _SEALED_TEXT + base64.b64encode(self.seal(message.encode(), _NODE_AAD)).decode()

    def open_node(self, url: str, sealed: str, what: str) -> str | None:
        """A chain node's sealed ``message`` column opened, or ``None`` if it does not decrypt.

        Raises:
            StoreError: It names a key ``AGENT_RUNNER_ENCRYPTION_KEYS`` does not hold.
        """
        raw = node_sealed(sealed)
        opened = None if raw is None else self.open(url, raw, _NODE_AAD, what)
        return None if opened is None else opened.decode(errors="replace")

    def open_blob(self, address: str, sealed: bytes) -> tuple[str, bytes] | None:
        """A sealed blob and its reference, found from its address alone; ``None`` if it does not decrypt here.

        A blob is sealed with its reference as associated data, and the store keeps only the reference's HMAC. But
        AES-GCM is AES-CTR from the nonce's counter block 2 plus a tag over associated data and ciphertext: CTR gives
        the candidate bytes without the reference, their hash gives the reference (in either form), the address
        confirms it, and the tag then authenticates bytes and reference together, as ``open`` does.

        Raises:
            StoreError: It names a key ``AGENT_RUNNER_ENCRYPTION_KEYS`` does not hold.
        """
        found = self._key_of(
            sealed, lambda key_id: f"a blob is encrypted with key {key_id!r}, which {KEYS_ENV} does not hold"
        )
        if found is None:
            return None
        key_id, nonce, body = found
        if len(nonce) != _NONCE_BYTES or len(body) < _TAG_BYTES:
            return None
        decryptor = Cipher(algorithms.AES(self._keys[key_id]), modes.CTR(nonce + (2).to_bytes(4, "big"))).decryptor()
        candidate = decryptor.update(body[:-_TAG_BYTES]) + decryptor.finalize()
        for short in (False, True):
            ref = ref_for(candidate, short)
            if hmac.compare_digest(self.address(ref), address):
                try:
                    return ref, self._ciphers[key_id].decrypt(nonce, body, ref.encode())
                except InvalidTag:
                    return None
        return None


def node_sealed(message: str) -> bytes | None:
    """The sealed bytes a chain node's ``message`` column holds, or ``None`` if it holds no sealed value."""
    if not message.startswith(_SEALED_TEXT):
        return None
    try:
        return base64.b64decode(message.removeprefix(_SEALED_TEXT), validate=True)
    except ValueError:
        return None


def sealed_key_id(sealed: bytes) -> tuple[str, int] | None:
    """The id of the key ``sealed`` names and where its nonce starts, or ``None`` if it is not a sealed value."""
    start = len(_SEALED) + 2
    if not sealed.startswith(_SEALED) or len(sealed) < start:
        return None
    end = start + int.from_bytes(sealed[len(_SEALED) : start], "big")
    if len(sealed) < end:
        return None
    return sealed[start:end].decode(errors="replace"), end


class _EncryptedStore(ContentStore):
    """Any backend, holding only ciphertext under HMAC addresses; callers see references and plain bytes.

    Blobs are sealed with their reference as associated data, so a blob moved to another address does not decrypt
    and is reported corrupted, as a changed one is. A chain node is filed under its head's address with its parent's
    address (so the backend still walks a chain in one query) and its message reference sealed.

    Args:
        inner: The backend, opened with ``cipher.setup``.
        cipher: The store's keys.
    """

    def __init__(self, inner: _Backend, cipher: _StoreCipher) -> None:
        self.url = inner.url
        self._inner = inner
        self._cipher = cipher

    async def put(self, blobs: Mapping[str, bytes]) -> int:
        _check_refs(self.url, blobs)
        addresses = {self._cipher.address(ref): ref for ref in blobs}
        written = await self._inner._write(self._sealed_blobs(blobs, addresses))
        return sum(len(blobs[addresses[address]]) for address in written)

    async def commit(
        self, blobs: Mapping[str, bytes], nodes: Sequence[ChainNode] = (), live: LiveEntries | None = None
    ) -> int:
        _check_refs(self.url, blobs)
        if self._cipher.plaintext and nodes:
            await self._seal_parent_chain(nodes)
        addresses = {self._cipher.address(ref): ref for ref in blobs}
        written = await self._inner._write_all(
            self._sealed_blobs(blobs, addresses),
            self._sealed_nodes(nodes),
            None if live is None else self._sealed_live(*live),
        )
        return sum(len(blobs[addresses[address]]) for address in written)

    def _sealed_blobs(self, blobs: Mapping[str, bytes], addresses: Mapping[str, str]) -> dict[str, bytes]:
        return {address: self._cipher.seal(blobs[ref], ref.encode()) for address, ref in addresses.items()}

    def _sealed_nodes(self, nodes: Sequence[ChainNode]) -> list[ChainNode]:
        address = self._cipher.address
        return [
            ChainNode(
                head=address(node.head),
                parent=None if node.parent is None else address(node.parent),
                message=self._cipher.seal_node(node.message),
            )
            for node in nodes
        ]

    def _sealed_live(self, run_id: str, entries: Sequence[bytes]) -> LiveEntries:
        # Each event sealed with its run as associated data: an event filed under another run does not open.
        aad = _LIVE_AAD + run_id.encode()
        return self._cipher.address(_LIVE_AAD.decode() + run_id), [self._cipher.seal(entry, aad) for entry in entries]

    async def _read(self, refs: list[str]) -> dict[str, bytes]:
        found = await self._read_sealed(refs)
        missing = [ref for ref in refs if ref not in found]
        if missing and self._cipher.plaintext:
            # Written before the store was encrypted (get() checks them against their refs all the same); then once
            # more sealed, for a blob that reencrypt moved between the two reads.
            found.update(await self._inner._read(missing))
            missing = [ref for ref in missing if ref not in found]
            if missing:
                found.update(await self._read_sealed(missing))
        return found

    async def _read_sealed(self, refs: list[str]) -> dict[str, bytes]:
        addresses = {self._cipher.address(ref): ref for ref in refs}
        found: dict[str, bytes] = {}
        for address, sealed in (await self._inner._read(list(addresses))).items():
            ref = addresses[address]
            # Bytes that do not decrypt are returned as stored: they do not hash to ref, so get() reports them.
            found[ref] = self._cipher.open(self.url, sealed, ref.encode(), f"blob {ref}") or sealed
        return found

    async def put_nodes(self, nodes: Sequence[ChainNode]) -> None:
        if self._cipher.plaintext and nodes:
            await self._seal_parent_chain(nodes)
        await self._put_sealed_nodes(nodes)

    async def _seal_parent_chain(self, nodes: Sequence[ChainNode]) -> None:
        """Seal the chain these nodes go on from if it was written before the store was encrypted.

        A sealed node names its parent's address, so the walk from it must find the parent sealed.
        """
        heads = {node.head for node in nodes}
        parents = {node.parent for node in nodes if node.parent is not None and node.parent not in heads}
        for parent in parents:
            try:
                await self._inner.chain(self._cipher.address(parent))
                continue  # sealed already
            except BlobMissing:
                pass
            try:
                refs = await self._inner.chain(parent)
            except BlobMissing:
                continue  # in neither form: the walk from the new nodes will say so
            nodes = _chain_nodes(refs)
            if nodes and nodes[-1].head == parent:  # a transcript's chain, whose heads are ours (``next_head``)
                await self._put_sealed_nodes(nodes)

    async def _put_sealed_nodes(self, nodes: Sequence[ChainNode]) -> None:
        await self._inner.put_nodes(self._sealed_nodes(nodes))

    async def chain(self, head: str) -> list[str]:
        if not self._cipher.plaintext:
            return await self._sealed_chain(head)
        try:
            return await self._sealed_chain(head)
        except BlobMissing:
            pass
        # Written before the store was encrypted; then once more sealed, for a chain reencrypt moved meanwhile.
        try:
            return await self._inner.chain(head)
        except BlobMissing:
            return await self._sealed_chain(head)

    async def _sealed_chain(self, head: str) -> list[str]:
        try:
            sealed = await self._inner.chain(self._cipher.address(head))
        except BlobMissing as error:
            if error.refs == (self._cipher.address(head),):
                raise _missing_node(self.url, head, head) from None
            raise _missing_node(self.url, head, f"(filed under {', '.join(error.refs)})") from None
        messages = []
        for text in sealed:
            opened = None
            if text.startswith(_SEALED_TEXT):
                with contextlib.suppress(ValueError):
                    raw = base64.b64decode(text.removeprefix(_SEALED_TEXT), validate=True)
                    opened = self._cipher.open(self.url, raw, _NODE_AAD, f"a chain node of {head}")
            if opened is None:
                raise BlobCorrupted(
                    f"the store at {self.url} holds a corrupted transcript under {head}: a chain node does not "
                    "decrypt, so it was not used. Restore the store from a backup; a run that needs this transcript "
                    "cannot go on, so start it again",
                    refs=(head,),
                    url=self.url,
                )
            messages.append(opened.decode())
        return messages

    async def append_live(self, run_id: str, entries: Sequence[bytes]) -> None:
        await self._inner.append_live(*self._sealed_live(run_id, entries))

    async def read_live(self, run_id: str, after: int = 0, *, limit: int = LIVE_READ_LIMIT) -> list[tuple[int, bytes]]:
        aad = _LIVE_AAD + run_id.encode()
        rows = await self._inner.read_live(self._cipher.address(_LIVE_AAD.decode() + run_id), after, limit=limit)
        what = f"a live event of run {run_id}"
        opened = [(seq, self._cipher.open(self.url, sealed, aad, what)) for seq, sealed in rows]
        return [(seq, data) for seq, data in opened if data is not None]  # a preview that does not open is dropped

    async def stats(self) -> StoreStats:
        return await self._inner.stats()

    async def clock(self) -> float:
        return await self._inner.clock()

    async def sweep(
        self, keep_blobs: Set[str], keep_heads: Set[str], *, written_before: float, dry_run: bool = False
    ) -> Swept:
        address = self._cipher.address
        # Content written before the store was encrypted is kept under its own name too, until reencrypt moved it.
        plain_blobs, plain_heads = (keep_blobs, keep_heads) if self._cipher.plaintext else (set(), set())
        return await self._inner.sweep(
            {address(ref) for ref in keep_blobs} | plain_blobs,
            {address(head) for head in keep_heads} | plain_heads,
            written_before=written_before,
            dry_run=dry_run,
        )

    async def close(self) -> None:
        await self._inner.close()


def _chain_nodes(refs: Sequence[str]) -> list[ChainNode]:
    """The nodes of the chain of these messages, from the root, named as transcripts name them (``next_head``)."""
    nodes: list[ChainNode] = []
    head: str | None = None
    for ref in refs:
        node = ChainNode(head=next_head(head, ref), parent=head, message=ref)
        nodes.append(node)
        head = node.head
    return nodes


# ---------------------------------------------------------------------------------------------------- reencrypt

REENCRYPT_CHUNK = 64
"""Blobs read and sealed at a time: blobs run to megabytes."""


@dataclass(frozen=True)
class Reencrypted:
    """What ``reencrypt`` did.

    Attributes:
        blobs: Blobs found unencrypted, and sealed.
        nodes: Chain nodes found unencrypted, and sealed.
        corrupted: Unencrypted blobs that do not hash to their reference: left as they are, never sealed.
        removed: Whether the unencrypted copies were removed (``remove_plaintext``).
        left: Unencrypted blobs and nodes still in the store (written meanwhile, or not removed).
    """

    blobs: int
    nodes: int
    corrupted: int
    removed: bool
    left: int

    def summary(self) -> str:
        """One line for a person, saying what to do next."""
        done = f"sealed {self.blobs} blobs and {self.nodes} chain nodes stored unencrypted"
        if self.corrupted:
            done += f"; left {self.corrupted} corrupted blobs as they were"
        if not self.removed:
            return (
                f"{done}; their unencrypted copies stay until every worker and client runs with the keys: then run "
                "`agent-runner store reencrypt --remove-plaintext`"
            )
        if self.left:
            return (
                f"{done} and removed their unencrypted copies; {self.left} unencrypted blobs and nodes are left "
                "(written meanwhile by a process without the keys?): run it again once every process has them"
            )
        return f"{done} and removed their unencrypted copies: the store holds no unencrypted content"


async def reencrypt(
    url: str | None = None, *, environ: Mapping[str, str] | None = None, remove_plaintext: bool = False
) -> Reencrypted:
    """Encrypt, in place, what a store holds unencrypted: content written before encryption was turned on.

    Safe while runs are live. Each unencrypted blob and chain node is sealed beside its unencrypted copy, and the
    store is marked (``PLAINTEXT_PENDING``) so that processes opened with the keys read either form; processes
    without the keys can no longer open it, but those already running go on reading and writing unencrypted rows.
    Once every worker and client runs with the keys, ``remove_plaintext`` seals what they wrote meanwhile and removes
    the unencrypted copies (every live event written unencrypted too); the mark goes once none are left.

    Args:
        url: The store, as ``open_store`` takes it; ``AGENT_RUNNER_STORE`` by default.
        environ: Where ``AGENT_RUNNER_STORE`` and ``AGENT_RUNNER_ENCRYPTION_KEYS`` are read; ``os.environ`` by
            default.
        remove_plaintext: Remove the unencrypted copies after sealing them.

    Raises:
        StoreError: No keys are set, or the store cannot be opened with them, or failed.
    """
    env = os.environ if environ is None else environ
    keys = keys_from_env(env)
    if not keys:
        raise StoreError(f"set {KEYS_ENV} to the keys to encrypt the store with (the workers' keys)")
    cipher = _StoreCipher(keys, adopt_plaintext=True)
    backend = _open_backend(url if url is not None else env.get(STORE_ENV) or None, cipher.setup)
    store = _EncryptedStore(backend, cipher)
    try:
        refs, nodes = await backend._plaintext()
        sealed: list[str] = []
        corrupted = 0
        for chunk in _chunks(refs, REENCRYPT_CHUNK):
            found = await backend._read(list(chunk))
            good = {ref: data for ref, data in found.items() if names(ref, data)}
            corrupted += len(found) - len(good)
            await store.put(good)
            sealed.extend(good)
        for node_chunk in _chunks(nodes, NODE_CHUNK):
            await store._put_sealed_nodes(node_chunk)
        left = len(refs) + len(nodes)
        if remove_plaintext:
            # Every copy is sealed before any is removed, so a reader always finds one form or the other.
            await backend._remove_plaintext(sealed, [node.head for node in nodes])
            left_refs, left_nodes = await backend._plaintext()
            left = len(left_refs) + len(left_nodes)
            if not left:
                await backend._delete_meta(PLAINTEXT_PENDING)
        return Reencrypted(
            blobs=len(sealed), nodes=len(nodes), corrupted=corrupted, removed=remove_plaintext, left=left
        )
    finally:
        await store.close()


# ---------------------------------------------------------------------------------------------------- open_store


def default_store_path() -> Path:
    """Where the store lives when nothing says otherwise: ``$XDG_DATA_HOME/agent-runner/store.db``.

    ``XDG_DATA_HOME`` defaults to ``~/.local/share``; a relative value is ignored, as the XDG specification says.
    """
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if os.path.isabs(data_home) else Path.home() / ".local" / "share"
    return base / "agent-runner" / "store.db"


_SECRET_PARAMS = frozenset({"password", "sslpassword"})
"""libpq parameters whose values are secrets, in a URL's query or in a ``key=value`` keyword string."""

_SECRET_KEYWORD = re.compile(r"(?<![\w])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)")
"""A secret in libpq's keyword form (``host=db password=hunter2``): a value is a word or single-quoted."""


def redact_store_url(url: str) -> str:
    """``url`` as it may be shown (logs, errors, workflow history, Claude): every password in it replaced by ``***``.

    A PostgreSQL store can be given its password three ways, all hidden: ``user:password@host``, a ``password=``
    (or ``sslpassword=``) query parameter, and libpq's keyword form (``host=db password=hunter2``), which is not a
    store URL but is what someone may set ``AGENT_RUNNER_STORE`` to, and so what the error refusing it shows.

    Args:
        url: A store URL, or whatever ``AGENT_RUNNER_STORE`` was set to.
    """
    if "://" not in url:
        return _SECRET_KEYWORD.sub(r"\1***", url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{host}"
    items = parts.query.split("&") if parts.query else []
    query = "&".join(
        f"{name}=***" if unquote_plus(name) in _SECRET_PARAMS else item
        for item in items
        for name in [item.partition("=")[0]]
    )
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _scrubbed(text: str, url: str) -> str:
    """``text`` (a driver's error) without the passwords of ``url``, should the driver quote any of them."""
    parts = urlsplit(url)
    secrets = [parts.password or ""]
    secrets += [value for name, value in parse_qsl(parts.query, keep_blank_values=True) if name in _SECRET_PARAMS]
    for secret in sorted({s for found in secrets for s in (found, quote(found))}, key=len, reverse=True):
        if len(secret) >= 4:  # a shorter one would hide unrelated words of the message, and gives little away
            text = text.replace(secret, "***")
    return text


def _sqlite_path(url: str) -> Path:
    rest = url.removeprefix("sqlite:")
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):
            raise StoreError(
                f"{redact_store_url(url)!r} is not a SQLite store URL: write sqlite:///absolute/path.db (three "
                "slashes) or sqlite:relative/path.db"
            )
    if not rest:
        raise StoreError(
            f"{redact_store_url(url)!r} names no file: write sqlite:///absolute/path.db or sqlite:relative/path.db"
        )
    return Path(rest).expanduser()


def open_store(url: str | None = None, *, environ: Mapping[str, str] | None = None) -> ContentStore:
    """Open the content store at ``url``, creating its schema if needed; encrypted when keys are configured.

    Args:
        url: ``sqlite:///absolute/path.db``, ``sqlite:relative/path.db``, ``postgresql://user:pw@host:port/db``
            (or ``postgres://``), or ``memory:``. ``None`` reads ``AGENT_RUNNER_STORE``; if that is unset or empty,
            the SQLite file ``default_store_path()``, whose directory is created.
        environ: Where ``AGENT_RUNNER_STORE`` and ``AGENT_RUNNER_ENCRYPTION_KEYS`` are read; ``os.environ`` by
            default. With keys, what is stored is encrypted (see the module's docstring).

    Returns:
        The open store; ``close()`` it when done (or use it as ``async with``).

    Raises:
        StoreError: The URL's scheme is unknown, or the store cannot be opened: among others, an encrypted store
            opened without its keys or with others, or a store holding unencrypted content opened with keys.
        ConfigurationError: ``AGENT_RUNNER_ENCRYPTION_KEYS`` is malformed.
    """
    env = os.environ if environ is None else environ
    keys = keys_from_env(env)
    cipher = _StoreCipher(keys) if keys else None
    setup = _plain_setup if cipher is None else cipher.setup
    backend = _open_backend(url if url is not None else env.get(STORE_ENV) or None, setup)
    return backend if cipher is None else _EncryptedStore(backend, cipher)


def _open_backend(url: str | None, setup: _MetaSetup) -> _Backend:
    if url is None:
        path = default_store_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {path.parent} for the default store: {exc}; set {STORE_ENV}") from exc
        return _SqliteStore(path, f"sqlite://{path}", setup=setup)
    if url.startswith("sqlite:"):
        return _SqliteStore(_sqlite_path(url), redact_store_url(url), setup=setup)
    if url.startswith(("postgresql://", "postgres://")):
        return _PostgresStore(url, redact_store_url(url), setup=setup)
    if url == "memory:":
        return _MemoryStore(setup)
    raise StoreError(
        f"unknown store URL {redact_store_url(url)!r}: use sqlite:///absolute/path.db, sqlite:relative/path.db, "
        f"postgresql://user:password@host:port/database (or postgres://...), or memory: (this process only). "
        f"Set it with {STORE_ENV}."
    )
