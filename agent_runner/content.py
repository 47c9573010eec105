"""The activities' view of the content store: load a transcript, resolve placeholders, store what is new.

A worker keeps recently used blobs and transcripts in memory. Everything in the store is named by its content, so a
cached entry can never be stale: a run's next model call on the same worker reads only what it has not seen.

This is the boundary between plain content and content as held (``contract/transcript.py``): the ``offload*``
methods take plain JSON (Claude's reply, a tool's result, a client's messages), ``escape`` it once and store its big
parts; ``resolve`` gives plain JSON back. Nothing else turns data into placeholders or placeholders into data.

A blob the store holds corrupted fails the activity that needs it for good (``ApplicationError`` of type
``BlobCorrupted``, not retryable): another attempt reads the same store, so retrying would only hang the run. A blob
the store does not hold (``BlobMissing``) is tried again a few times (``MISSING_BLOB_ATTEMPTS``), on any worker, before
it fails the run: the worker that looked may be the one whose ``AGENT_RUNNER_STORE`` is wrong (a mistyped URL opens a
new, empty store), and another worker, or this one set right, reads it.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agent_runner.contract.big_params import PARAM_INLINE_LIMIT, big_values, slim_tools
from agent_runner.contract.errors import BlobCorrupted, BlobMissing
from agent_runner.contract.transcript import (
    INLINE_LIMIT,
    RESULT_INLINE_LIMIT,
    canonical,
    escape,
    next_head,
    offload,
    placeholder_refs,
    ref_for,
    resolve,
    stored,
)
from agent_runner.store import ChainNode, ContentStore, LiveEntries, open_store

_TEXT_BLOCKS = frozenset({"text", "thinking", "redacted_thinking"})
"""Blocks a run only carries (it reads no field of theirs), which ``offload_reply`` may store from a smaller size."""


MISSING_BLOB_ATTEMPTS = 4
"""Attempts of an activity that finds content missing before the run fails with ``BlobMissing``."""

MISSING_BLOB_RETRY_DELAY = timedelta(seconds=20)
"""Between those attempts: about a minute in all for a fleet to hand the task to a worker with the right store, or
for a misconfigured one to be restarted, before the run fails."""


CHAIN_CACHE_REFS = 100_000
"""How many message refs the remembered transcripts (``Content._chains``) may count together: at most 8 MB of lists
and refs (13 MB with 71-character refs), measured with no list shared. Enough for a worker's every run in flight (a
thousand runs of some fifty messages; a transcript's old and new heads share a list but count twice) to find its
transcript at its next model call without reading it back from the store, which a bound on the number of transcripts
alone would not give."""

CACHE_ENTRY_OVERHEAD = 1_000
"""Bytes a cached blob counts beyond its JSON: decoded, a small message (a dict, a list of blocks, their strings) takes
about this much more memory than its JSON, so a cache of many small messages keeps to its budget too."""


class Content:
    """Reads and writes transcripts and stored content for one worker.

    Args:
        store: The content store; by default the one ``AGENT_RUNNER_STORE`` names (``open_store``).
        cache_bytes: About how much memory the decoded blobs it keeps may take (``CACHE_ENTRY_OVERHEAD``).
    """

    def __init__(self, store: ContentStore | None = None, *, cache_bytes: int = 64_000_000) -> None:
        self._store = store
        self._blobs: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._blob_bytes = 0
        self._cache_bytes = cache_bytes
        self._chains: OrderedDict[str, tuple[list[str], int]] = OrderedDict()
        """Recent transcripts' refs by head: the first ``length`` refs of a list that the transcript's later heads
        share and extend, so an append costs its new messages only, however long the transcript."""
        self._chain_refs = 0
        """The ``length`` of every remembered transcript, summed (a list two heads share counts twice: a bound)."""

    @property
    def store(self) -> ContentStore:
        """The store, opened on first use so a worker that never needs it starts without it."""
        if self._store is None:
            self._store = open_store()
        return self._store

    async def values(self, refs: list[str]) -> dict[str, Any]:
        """The decoded JSON values stored under ``refs``."""
        found = {ref: self._blobs[ref][0] for ref in refs if ref in self._blobs}
        for ref in found:
            self._blobs.move_to_end(ref)
        missing = [ref for ref in dict.fromkeys(refs) if ref not in found]
        if missing:
            with _unrecoverable_in_activity():
                read = await self.store.get(missing)
            for ref, data in read.items():
                found[ref] = json.loads(data)
                self._remember(ref, found[ref], len(data))
        return found

    async def resolve(self, value: Any) -> Any:
        """``value`` as plain JSON: placeholders replaced by what they stand for, escapes unwrapped (``resolve``).

        Placeholders nested in stored content are read too, in as few store reads as the nesting allows.
        """
        known: dict[str, Any] = {}
        wanted = list(dict.fromkeys(placeholder_refs(value)))
        while wanted:
            fetched = await self.values(wanted)
            known.update(fetched)
            wanted = list(dict.fromkeys(r for v in fetched.values() for r in placeholder_refs(v) if r not in known))
        return resolve(value, known.__getitem__)

    async def messages(self, head: str | None, start: int = 0) -> list[dict[str, Any]]:
        """The messages of the transcript ``head`` from index ``start`` on, as held (placeholders unresolved)."""
        refs, length = await self._chain(head)
        wanted = refs[start:length]
        values = await self.values(wanted)
        return [values[ref] for ref in wanted]

    async def length(self, head: str | None) -> int:
        """How many messages the transcript ``head`` holds."""
        return (await self._chain(head))[1]

    async def _chain(self, head: str | None) -> tuple[list[str], int]:
        """The transcript ``head``'s message refs: the first ``length`` of a list (remembered, checked when read).

        The list may go on past ``length`` with a later head's messages: read it up to ``length`` only.
        """
        if head is None:
            return [], 0
        chain = self._chains.get(head)
        if chain is None:
            with _unrecoverable_in_activity():
                refs = await self.store.chain(head)
                self._check_chain(head, refs)
            chain = (refs, len(refs))
        self._remember_chain(head, chain)
        return chain

    def _check_chain(self, head: str, refs: list[str]) -> None:
        """Refuse a chain whose nodes do not hash to ``head``: a changed node would send Claude another message.

        Blobs are checked by the store; a head is ours (``next_head``), so it is checked here.
        """
        computed: str | None = None
        for ref in refs:
            computed = next_head(computed, ref)
        if computed != head:
            url = self.store.url
            raise BlobCorrupted(
                f"the store at {url} holds a corrupted transcript under {head}: its chain nodes do not hash to it, so "
                "they were not used. Restore the store from a backup; a run that needs this transcript cannot go on, "
                "so start it again",
                refs=(head,),
                url=url,
            )

    async def append(self, head: str | None, messages: list[dict[str, Any]]) -> str | None:
        """Store ``messages`` after the transcript ``head``; return the new head."""
        if not messages:
            return head
        (new_head,) = await self.append_many([(head, messages)])
        return new_head

    async def append_many(
        self,
        appends: Sequence[tuple[str | None, list[dict[str, Any]]]],
        *,
        blobs: Mapping[str, bytes] | None = None,
        live: LiveEntries | None = None,
        short: bool = False,
    ) -> list[str | None]:
        """Store each ``(head, messages)`` as ``append`` does, other blobs and a run's live events, in one store commit.

        Args:
            appends: Each transcript's head and the messages to append to it.
            blobs: More blobs to store, by reference (``offload_reply``'s ``deferred``).
            live: A run's live events (``EventPublisher.take``).
            short: Name the messages (and so the heads) by short references, as the run does (``Transcript``).

        Returns:
            The new head of each transcript, in order.
        """
        blobs = dict(blobs or {})
        nodes: list[ChainNode] = []
        heads: list[str | None] = []
        chains: list[tuple[str, tuple[list[str], int]]] = []
        for head, messages in appends:
            # The new chain is remembered when the old one is, so the run's next call on this worker reads nothing.
            known = ([], 0) if head is None else self._chains.get(head)
            new_refs: list[str] = []
            for message in messages:
                data = canonical(message)
                ref = ref_for(data, short)  # message_ref(message, short), without serializing it again
                blobs[ref] = data
                new_head = next_head(head, ref)
                nodes.append(ChainNode(head=new_head, parent=head, message=ref))
                head = new_head
                new_refs.append(ref)
                self._remember(ref, message, len(data))
            if known is not None and head is not None:
                chains.append((head, _extended(*known, new_refs)))
            heads.append(head)
        if blobs or nodes or (live is not None and live[1]):
            await self.store.commit(blobs, nodes, live)
        for head, chain in chains:
            self._remember_chain(head, chain)
        return heads

    async def offload(self, value: Any) -> Any:
        """A tool result's plain content as held: escaped, its big parts stored and replaced by placeholders.

        Big is more than ``RESULT_INLINE_LIMIT``, as for the ``tool_result`` blocks of ``offload_content``.
        """
        return await self._offload(escape(value), limit=RESULT_INLINE_LIMIT)

    async def offload_reply(
        self, reply: dict[str, Any], *, deferred: dict[str, bytes] | None = None, text_limit: bool = False
    ) -> dict[str, Any]:
        """Claude's reply (a response body) as held: escaped, each big content block stored (``_offload_block``).

        Args:
            reply: The response body.
            deferred: Where to put the big blocks' blobs instead of storing them: the caller stores them, in the
                commit that stores the reply (``append_many``), before it hands the reply on.
            text_limit: Store its text and thinking blocks over ``RESULT_INLINE_LIMIT`` too, as a tool result's
                content (a reply the run goes on from, whose text it does not read).
        """
        held = escape(reply)
        blocks = []
        for block in held.get("content") or []:
            if text_limit and isinstance(block, dict) and block.get("type") in _TEXT_BLOCKS:
                blocks.append(await self._offload(block, deferred, limit=RESULT_INLINE_LIMIT))
            else:
                blocks.append(await self._offload_block(block, deferred))
        return {**held, "content": blocks}

    async def offload_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Plain ``messages`` as held, their big content stored.

        A client sends the placeholders rather than the content, so the run's history stays small.
        """
        held: list[dict[str, Any]] = escape(messages)
        return [{**m, "content": await self._offload_content(m.get("content"))} if "content" in m else m for m in held]

    async def offload_content(self, content: Any) -> Any:
        """A message's plain content as held, its big parts stored, as the run itself would store them.

        The same content always gets the same placeholders, wherever it was stored from (a reply, a tool, a
        client), so an unchanged history sent back by a client matches what the run holds.
        """
        return await self._offload_content(escape(content))

    # The private halves take content already escaped: escaping twice would turn the first escapes into data.

    async def _offload(self, held: Any, deferred: dict[str, bytes] | None = None, limit: int = INLINE_LIMIT) -> Any:
        carried, parts = offload(held, limit)
        blobs = {ref: data for ref, (data, _) in parts.items()}
        if deferred is not None:
            deferred.update(blobs)
        elif blobs:
            await self.store.put(blobs)
        for ref, (data, part) in parts.items():
            # Kept as read back (a copy), so the next model call on this worker reads none of it from the store,
            # whatever the tool that returned it does with its own value.
            self._remember(ref, part if isinstance(part, str) else json.loads(data), len(data))
        return carried

    async def _offload_block(self, block: dict[str, Any], deferred: dict[str, bytes] | None = None) -> dict[str, Any]:
        """A held content block, stored and replaced by a placeholder if it is too big to carry.

        Of a big ``tool_use`` only the ``input`` is stored, so the run still sees which tool to call; of a big
        ``compaction`` only the summary, so the run still sees its ``tool_changes``. ``tool_addition`` and
        ``tool_removal`` blocks stay whole: which tools may run follows them (``conversation.tool_changes_in``).
        """
        if block.get("type") in ("tool_addition", "tool_removal"):
            return block
        for kind, key in (("tool_use", "input"), ("compaction", "content")):
            if block.get("type") == kind and key in block and len(canonical(block)) > INLINE_LIMIT:
                return {**block, key: stored(await self.put_value(block[key], deferred=deferred))}
        carried: dict[str, Any] = await self._offload(block, deferred)
        return carried

    async def _offload_content(self, content: Any) -> Any:
        if not isinstance(content, list):
            return await self._offload(content)
        blocks: list[Any] = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result" and "content" in block:
                # As a tool's own result is stored (``offload``), so a client's copy of it matches the run's.
                blocks.append({**block, "content": await self._offload(block["content"], limit=RESULT_INLINE_LIMIT)})
            elif isinstance(block, dict):
                blocks.append(await self._offload_block(block))
            else:
                blocks.append(block)
        return blocks

    async def tools_by_reference(
        self, tools: list[Any], limit: int = PARAM_INLINE_LIMIT, *, short: bool = False
    ) -> list[Any]:
        """Tool definitions with their big fields stored and replaced by placeholders (``contract/big_params.py``).

        Megabytes of input schemas would otherwise ride in a run's input, its state and each continuation.

        Args:
            tools: The definitions.
            limit: The size over which a field is big (``big_params.tool_field_limit``).
            short: Name the stored fields by their short references (fewer bytes in a history).
        """
        for value in big_values({}, tools, limit):
            await self.put_value(value, short=short)
        return slim_tools(tools, limit, short)

    async def put_value(self, value: Any, *, deferred: dict[str, bytes] | None = None, short: bool = False) -> str:
        """Store one JSON value whole, as given (not escaped: ``values`` reads it back as it was); return its ref.

        With ``deferred``, the blob is put there for the caller to store instead; with ``short``, it is named by its
        short reference.
        """
        data = canonical(value)
        ref = ref_for(data, short)
        if deferred is not None:
            deferred[ref] = data
        else:
            await self.store.put({ref: data})
        self._remember(ref, value, len(data))
        return ref

    def _remember(self, ref: str, value: Any, size: int) -> None:
        size += CACHE_ENTRY_OVERHEAD
        if ref in self._blobs or size > self._cache_bytes // 4:
            return
        self._blobs[ref] = (value, size)
        self._blob_bytes += size
        while self._blob_bytes > self._cache_bytes:
            _, (_, dropped) = self._blobs.popitem(last=False)
            self._blob_bytes -= dropped

    def _remember_chain(self, head: str, chain: tuple[list[str], int]) -> None:
        known = self._chains.pop(head, None)
        if known is not None:
            self._chain_refs -= known[1]
        self._chains[head] = chain
        self._chain_refs += chain[1]
        while self._chain_refs > CHAIN_CACHE_REFS and len(self._chains) > 1:
            _, (_, dropped) = self._chains.popitem(last=False)
            self._chain_refs -= dropped


def _extended(refs: list[str], length: int, new: list[str]) -> tuple[list[str], int]:
    """The chain of ``refs[:length]`` followed by ``new``, sharing ``refs`` where it can.

    The list is extended in place when ``length`` is its end (the usual case: a run appends to its newest head), or
    reused when it goes on with ``new`` already (another attempt of the same call); otherwise (a fork from an older
    head) the prefix is copied, so the views of other heads stay as they were.
    """
    if len(refs) > length and refs[length : length + len(new)] != new:
        refs = refs[:length]
    if len(refs) == length:
        refs.extend(new)
    return refs, length + len(new)


@contextlib.contextmanager
def _unrecoverable_in_activity() -> Iterator[None]:
    """In an activity, turn a missing or corrupted blob into a failure Temporal retries a bounded number of times.

    Corrupted content is read the same way by every attempt: the run fails at once, with the store's message (what is
    corrupted, and what to do). Missing content may be another worker's to read (this one's store may be the wrong
    one): ``MISSING_BLOB_ATTEMPTS`` attempts, ``MISSING_BLOB_RETRY_DELAY`` apart, then the run fails; never a retry
    without end. Elsewhere (a client) the error is raised as is.
    """
    try:
        yield
    except (BlobMissing, BlobCorrupted) as error:
        if not activity.in_activity():
            raise
        info = activity.info()
        attempt, policy = info.attempt, info.retry_policy
        # Only while Temporal itself would try again: an at-most-once tool's activity has one attempt (the workflow
        # decides what follows), and one out of attempts would fail as retryable, read as an unknown outcome.
        retried = policy is None or not policy.maximum_attempts or attempt < policy.maximum_attempts
        if isinstance(error, BlobMissing) and attempt < MISSING_BLOB_ATTEMPTS and retried:
            raise ApplicationError(
                f"{error} (attempt {attempt} of {MISSING_BLOB_ATTEMPTS}: tried again in "
                f"{MISSING_BLOB_RETRY_DELAY.total_seconds():g} s, on any worker, in case this worker's store is the "
                "wrong one)",
                type=type(error).__name__,
                next_retry_delay=MISSING_BLOB_RETRY_DELAY,
            ) from error
        raise ApplicationError(str(error), type=type(error).__name__, non_retryable=True) from error
