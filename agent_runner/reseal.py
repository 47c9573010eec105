"""Re-sealing an encrypted content store under its current key after a rotation, so that old keys can be dropped.

An encrypted store (``agent_runner/store.py``) seals each blob and chain node under the key that was current when it
was first written, and every listed key still opens what it sealed; so after a rotation, old content stays under the
old key, and the key cannot leave ``AGENT_RUNNER_ENCRYPTION_KEYS`` (the point of rotating after a leak). ``reseal``
replaces each row sealed under another key by the same content sealed under the current one.

It is safe while workers run: a blob's bytes never change at its address, so each row is replaced only if it is
still as it was read (its header and nonce, or its whole sealed message), in short transactions of a few rows, and
its write time is kept (``gc`` retention is unchanged). Killed at any point, the store holds every row in one form or
the other, and running it again finishes the job. Live events (stream previews) cannot be resealed, since their run
is known only by its HMAC: those under old keys are removed, as ``gc`` would remove them after the retention.

A blob is sealed with its reference as associated data, and the store keeps only the reference's HMAC: the cipher
recovers the reference from the ciphertext itself (``_StoreCipher.open_blob``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from agent_runner.codec import KEYS_ENV, keys_from_env
from agent_runner.store import (
    _ADDRESS_KEY,
    _NONCE_BYTES,
    STORE_ENV,
    StoreError,
    _Backend,
    _chunks,
    _open_backend,
    _StoreCipher,
    node_sealed,
    sealed_key_id,
)

__all__ = ["KeyUse", "Resealed", "reseal"]

PAGE = 1000
"""Rows listed per query while looking for what an old key sealed."""

BLOB_CHUNK = 64
"""Blobs read, resealed and replaced per transaction: blobs run to megabytes."""

NODE_CHUNK = 500
"""Chain nodes resealed and replaced per transaction."""

_ONCE = "once every worker and client has the current key (and no run's Temporal history needs them)"

UNREADABLE = ""
"""The key id ``in_use`` counts rows under that name no key: not sealed values at all (corrupted)."""


@dataclass(frozen=True)
class KeyUse:
    """What is sealed under one key.

    Attributes:
        blobs: Number of blobs.
        nodes: Number of chain nodes.
    """

    blobs: int = 0
    nodes: int = 0


@dataclass(frozen=True)
class Resealed:
    """What ``reseal`` did (or, with ``check``, found).

    Attributes:
        url: The store, without any password.
        current: The current key's id, which everything is resealed under.
        blobs: Blobs resealed under it.
        nodes: Chain nodes resealed under it.
        live: Live events (stream previews) under other keys: removed, or with ``check`` found.
        corrupted: Blobs and nodes under another key that did not decrypt, left as they were.
        in_use: What each key id seals once done, the current key's included (``UNREADABLE``: rows naming none).
        listed: Every key id ``AGENT_RUNNER_ENCRYPTION_KEYS`` holds, current first.
        checked: Only counted (``check``): nothing was changed.
        plaintext: The store may still hold content from before it was encrypted (``agent-runner store reencrypt``).
    """

    url: str
    current: str
    blobs: int
    nodes: int
    live: int
    corrupted: int
    in_use: Mapping[str, KeyUse]
    listed: tuple[str, ...]
    checked: bool = False
    plaintext: bool = False

    @property
    def unknown(self) -> tuple[str, ...]:
        """Key ids in ``in_use`` that ``AGENT_RUNNER_ENCRYPTION_KEYS`` does not hold."""
        return tuple(key_id for key_id in self.in_use if key_id != UNREADABLE and key_id not in self.listed)

    @property
    def left(self) -> dict[str, KeyUse]:
        """What is still sealed under keys other than the current one."""
        return {key_id: use for key_id, use in self.in_use.items() if key_id != self.current}

    @property
    def removable(self) -> tuple[str, ...]:
        """Listed keys, besides the current one, that seal nothing in the store."""
        return tuple(key_id for key_id in self.listed[1:] if key_id not in self.in_use)

    def summary(self) -> str:
        """One line for a person, saying what to do next."""
        if self.checked:
            return self._check_summary()
        current = self.in_use.get(self.current, KeyUse())
        left = self.left
        if self.blobs or self.nodes or self.live or left:
            done = f"resealed {self.blobs} blobs and {self.nodes} nodes under key {self.current!r}"
        else:
            done = (
                f"nothing to reseal: all {current.blobs} blobs and {current.nodes} nodes are under the current key "
                f"{self.current!r}"
            )
        if self.live:
            done += f", and removed {self.live} live events (stream previews) sealed under old keys"
        if self.corrupted:
            done += f"; {self.corrupted} blobs and nodes under old keys do not decrypt (corrupted): left as they are"
        if left:
            blobs = sum(use.blobs for use in left.values())
            nodes = sum(use.nodes for use in left.values())
            done += (
                f"; {blobs} blobs and {nodes} nodes are left under key(s) {_names(left)} (written meanwhile by a "
                f"process whose first key is not {self.current!r}, or corrupted): restart every worker and client "
                f"with {self.current!r} first in {KEYS_ENV}, then run it again"
            )
        elif self.blobs or self.nodes:
            done += "; 0 left under old keys"
            if self.removable:
                done += f": key(s) {_names(self.removable)} can now be removed from {KEYS_ENV} {_ONCE}"
        elif self.removable:
            done += f"; key(s) {_names(self.removable)} seal nothing here: they can be removed from {KEYS_ENV} {_ONCE}"
        return done + self._plaintext_note()

    def _check_summary(self) -> str:
        uses = [
            f"{self._key_name(key_id)}: {use.blobs} blobs, {use.nodes} nodes" for key_id, use in self.in_use.items()
        ]
        line = f"keys in use in the store at {self.url}: {'; '.join(uses) if uses else 'none (it is empty)'}"
        if self.live:
            line += f"; {self.live} live events (stream previews) under other keys than {self.current!r}"
        if self.unknown:
            line += f". Add key(s) {_names(self.unknown)} after the current key in {KEYS_ENV} to reseal them"
        elif self.left or self.live:
            line += f". Run `agent-runner store reseal` to reseal them under {self.current!r}"
        elif self.removable:
            line += f". Key(s) {_names(self.removable)} seal nothing here: they can be removed from {KEYS_ENV} {_ONCE}"
        return line + self._plaintext_note()

    def _key_name(self, key_id: str) -> str:
        if key_id == UNREADABLE:
            return "unreadable (naming no key)"
        if key_id == self.current:
            return f"{key_id!r} (current)"
        return f"{key_id!r} (not in {KEYS_ENV})" if key_id in self.unknown else repr(key_id)

    def _plaintext_note(self) -> str:
        if not self.plaintext:
            return ""
        return (
            "; the store may still hold content from before it was encrypted: run "
            "`agent-runner store reencrypt --remove-plaintext`"
        )


def _names(key_ids: Mapping[str, object] | tuple[str, ...]) -> str:
    return ", ".join("(none: unreadable)" if key_id == UNREADABLE else repr(key_id) for key_id in key_ids)


async def reseal(
    url: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    check: bool = False,
    limit: int | None = None,
) -> Resealed:
    """Reseal under the current key every blob and chain node of a store sealed under another listed key.

    Safe while runs are live, idempotent, and resumable after a kill (see the module's docstring). Once nothing is
    left under other keys, the store's address key is no longer kept wrapped under them either.

    Args:
        url: The store, as ``open_store`` takes it; ``AGENT_RUNNER_STORE`` by default.
        environ: Where ``AGENT_RUNNER_STORE`` and ``AGENT_RUNNER_ENCRYPTION_KEYS`` are read; ``os.environ`` by
            default. Its first key is the current one.
        check: Only count what each key seals; change nothing.
        limit: Reseal at most this many blobs and nodes, then stop (a later call goes on).

    Returns:
        What was resealed, and what each key seals afterwards.

    Raises:
        StoreError: No keys are set; the first key is not the store's current key (another opened it as current
            since); the store holds content under a key not listed (nothing is changed then); or the store cannot
            be opened with the keys, or failed.
    """
    env = os.environ if environ is None else environ
    keys = keys_from_env(env)
    if not keys:
        raise StoreError(
            f"set {KEYS_ENV} to the workers' keys, the current key first and the older ones after it, to reseal the "
            "store under the current key"
        )
    cipher = _StoreCipher(keys, newest=True)
    backend = _open_backend(url if url is not None else env.get(STORE_ENV) or None, cipher.setup)
    try:
        before = await _census(backend)
        listed = tuple(keys)
        if check:
            live = await backend._live_not_under(cipher.header(cipher.current), remove=False)
            return Resealed(
                backend.url, cipher.current, 0, 0, live, 0, before, listed, checked=True, plaintext=cipher.plaintext
            )
        unknown = {k: use for k, use in before.items() if k != UNREADABLE and k not in keys}
        if unknown:
            blobs = sum(use.blobs for use in unknown.values())
            nodes = sum(use.nodes for use in unknown.values())
            raise StoreError(
                f"the store at {backend.url} holds {blobs} blobs and {nodes} nodes encrypted with key(s) "
                f"{_names(unknown)}, which {KEYS_ENV} does not hold: list them after the current key and run it "
                "again (nothing was resealed)"
            )
        pass_ = _Pass(backend, cipher, limit)
        if any(key_id != cipher.current for key_id in before):
            await pass_.blobs()
            await pass_.nodes()
            await backend._checkpoint()
        live = await backend._live_not_under(cipher.header(cipher.current), remove=True)
        after = await _census(backend)
        if not any(key_id != cipher.current for key_id in after):
            # Nothing needs the old keys any more: neither should the address key, or one leaked key would still
            # reveal which references the store holds. When each key became current stays known (_KEY_SINCE).
            for key_id in cipher.wrapped - {cipher.current}:
                await backend._delete_meta(_ADDRESS_KEY + key_id)
        return Resealed(
            backend.url,
            cipher.current,
            pass_.resealed_blobs,
            pass_.resealed_nodes,
            live,
            pass_.corrupted,
            after,
            listed,
            plaintext=cipher.plaintext,
        )
    finally:
        await backend.close()


async def _census(backend: _Backend) -> dict[str, KeyUse]:
    """What each key id seals in the store: its blobs and chain nodes, current or not."""
    blobs: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    after = ""
    while page := await backend._sealed_blob_heads(after, PAGE):
        after = page[-1][0]
        blobs.update(_key_of(head) for _, head in page)
    after = ""
    while node_page := await backend._sealed_node_page(after, PAGE):
        after = node_page[-1][0]
        nodes.update(_key_of(node_sealed(message) or b"") for _, message in node_page)
    return {key_id: KeyUse(blobs[key_id], nodes[key_id]) for key_id in sorted(blobs.keys() | nodes.keys())}


def _key_of(sealed: bytes) -> str:
    parsed = sealed_key_id(sealed)
    return UNREADABLE if parsed is None else parsed[0]


class _Pass:
    """One pass over the store, resealing what other keys sealed, at most ``limit`` rows."""

    def __init__(self, backend: _Backend, cipher: _StoreCipher, limit: int | None) -> None:
        self._backend = backend
        self._cipher = cipher
        self._budget = limit
        self.resealed_blobs = 0
        self.resealed_nodes = 0
        self.corrupted = 0

    def _take(self, wanted: int) -> int:
        """How many of ``wanted`` rows the limit leaves to reseal."""
        if self._budget is None:
            return wanted
        taken = min(wanted, self._budget)
        self._budget -= taken
        return taken

    def _stale(self, key_id: str) -> bool:
        # Rows naming no key, or an unlisted one (written meanwhile: the census refused those found before), stay.
        return key_id not in (self._cipher.current, UNREADABLE) and key_id in self._cipher.key_ids()

    async def blobs(self) -> None:
        after = ""
        while page := await self._backend._sealed_blob_heads(after, PAGE):
            after = page[-1][0]
            stale = [address for address, head in page if self._stale(_key_of(head))]
            for chunk in _chunks(stale, BLOB_CHUNK):
                chunk = chunk[: self._take(len(chunk))]
                if not chunk:
                    return
                found = await self._backend._read(list(chunk))
                replacements = []
                for address, sealed in found.items():
                    parsed = sealed_key_id(sealed)
                    if parsed is None or not self._stale(parsed[0]):
                        continue
                    opened = self._cipher.open_blob(address, sealed)
                    if opened is None:
                        self.corrupted += 1
                        continue
                    ref, data = opened
                    # The header and nonce name this sealing alone: a row changed since is left as it is.
                    resealed = self._cipher.seal(data, ref.encode())
                    replacements.append((address, sealed[: parsed[1] + _NONCE_BYTES], resealed))
                self.resealed_blobs += await self._backend._replace_sealed(replacements, [])

    async def nodes(self) -> None:
        after = ""
        url = self._backend.url
        while page := await self._backend._sealed_node_page(after, PAGE):
            after = page[-1][0]
            stale = [(head, message) for head, message in page if self._stale(_key_of(node_sealed(message) or b""))]
            for chunk in _chunks(stale, NODE_CHUNK):
                chunk = chunk[: self._take(len(chunk))]
                if not chunk:
                    return
                replacements = []
                for head, message in chunk:
                    opened = self._cipher.open_node(url, message, f"the chain node {head}")
                    if opened is None:
                        self.corrupted += 1
                        continue
                    replacements.append((head, message, self._cipher.seal_node(opened)))
                self.resealed_nodes += await self._backend._replace_sealed([], replacements)
