"""Where a run's conversation lives: content-addressed blobs, and the references the workflow holds instead.

Every Temporal agent integration we know of sends the whole conversation as each model call's input, so a run's
history grows with the square of its length until Temporal ends it (50 MB). A run here sends each piece of content
through history at most once:

- A message is stored as a blob named by the SHA-256 of its canonical JSON (``message_ref``). A transcript is a
  chain of nodes, one per message, each named by its parent's name and its message's (``next_head``): a transcript
  of any length is one *head*, and two runs (or a run and its fork) that share a prefix share its nodes.
- The workflow holds the heads and roles of the messages it stored (``Mark``) and, whole, only the messages it has
  not stored yet (``pending``): tool results, injected messages. A model call gets ``(head, pending)``, reads the
  rest from the store, stores ``pending`` and the reply, and the workflow computes the new heads itself.
- Content too big to be worth carrying (a long reply, a 5 MB tool result) is stored apart and replaced, wherever
  it appears, by a placeholder: ``{"agent_runner.stored": ref}`` stands for the stored JSON value, and a
  ``{"agent_runner.splice": ref}`` element of a content list stands for the content blocks of the stored message.
  ``resolve`` puts the content back; readers (the model call, the Python client) resolve before use.
- Content is held in that form only: data that merely *looks* like a placeholder (an object whose one key is one of
  ours, in Claude's ``tool_use.input``, a tool's result, a client's message) is data. ``escape`` wraps each such
  object as ``{"agent_runner.escaped": object}`` when content enters (every writer goes through it, in
  ``agent_runner/content.py``), and ``resolve`` unwraps it, so only the placeholders we made are ever looked up. Data
  without such objects is held unchanged: its refs, and the request bodies built from it, are what they always were.

This module is pure (hashing and JSON only), so workflow code uses it; the store itself is ``agent_runner/store.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

STORED = "agent_runner.stored"
"""The key of a placeholder that stands for a stored JSON value."""

SPLICE = "agent_runner.splice"
"""The key of a content-list element that stands for the content blocks of a stored message."""

ESCAPED = "agent_runner.escaped"
"""The key of an escape: ``{ESCAPED: object}`` stands for ``object``, data whose one key is one of ``RESERVED``."""

RESERVED = frozenset({STORED, SPLICE, ESCAPED})
"""The keys whose one-key objects mean something to ``resolve``; data shaped so is held escaped."""

INLINE_LIMIT = 4096
"""Content bigger than this (in canonical JSON bytes) is stored apart rather than carried through history."""

RESULT_INLINE_LIMIT = 256
"""A tool result's content bigger than this is stored apart. Lower than ``INLINE_LIMIT`` because a result is carried
twice (the tool call's output and the next model call's input), and results are most of what an iteration adds to
the run's history: a 1 KB result carried inline made an iteration weigh 4.5 KB, and its placeholder is 90 bytes."""


def canonical(value: Any) -> bytes:
    """The bytes a JSON value is named and stored by: sorted keys, no spaces, UTF-8."""
    if isinstance(value, str):
        # A big tool result is a string: one that needs no escape is its UTF-8 between quotes, found in two passes
        # over its bytes at C speed, twice as fast as the encoder's loop over its characters. The bytes are the
        # encoder's (a name must never change); a lone surrogate fails `encode` as it fails below.
        try:
            data = value.encode()
        except UnicodeEncodeError:
            pass
        else:
            if len(data.translate(None, _JSON_ESCAPED)) == len(data):
                return b'"' + data + b'"'
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


_JSON_ESCAPED = bytes(range(0x20)) + b'"\\'
"""The bytes JSON escapes in a string (``ensure_ascii=False``: no others)."""


SHORT_PREFIX = "~"
"""How a short reference starts: ``~`` and the URL-safe base64 of the first 128 bits of the SHA-256 of the bytes (23
characters, against 71 for ``sha256:`` and the hex digest). Content stored since the ``lean-iteration-history`` patch
is named so; a reference names its content whichever form it has, and the store reads both (issue 14)."""


def ref_for(data: bytes, short: bool = False) -> str:
    """The name of a blob: ``sha256:`` and the hex digest of its bytes, or with ``short`` its short form."""
    digest = hashlib.sha256(data)
    if short:
        return SHORT_PREFIX + base64.urlsafe_b64encode(digest.digest()[:16]).rstrip(b"=").decode()
    return "sha256:" + digest.hexdigest()


def is_short(ref: str) -> bool:
    """Whether ``ref`` is a short reference (``SHORT_PREFIX``)."""
    return ref.startswith(SHORT_PREFIX)


def names(ref: str, data: bytes) -> bool:
    """Whether ``ref`` is the name of ``data``, in the form ``ref`` has."""
    return ref_for(data, short=is_short(ref)) == ref


def message_ref(message: dict[str, Any], short: bool = False) -> str:
    """The name of a message (as held, placeholders included)."""
    return ref_for(canonical(message), short)


def next_head(parent: str | None, ref: str) -> str:
    """The name of the transcript ``parent`` followed by the message named ``ref`` (short when ``ref`` is)."""
    return ref_for(canonical({"parent": parent, "message": ref}), short=is_short(ref))


def stored(ref: str) -> dict[str, str]:
    """A placeholder for the stored JSON value ``ref``."""
    return {STORED: ref}


def splice(ref: str) -> dict[str, str]:
    """A content-list element standing for the content blocks of the stored message ``ref``."""
    return {SPLICE: ref}


def is_placeholder(value: Any) -> bool:
    """Whether ``value`` stands for stored content."""
    return isinstance(value, dict) and len(value) == 1 and (STORED in value or SPLICE in value)


def _reserved_key(value: dict[str, Any]) -> str | None:
    """The key of a one-key object whose key is reserved, else ``None``."""
    if len(value) != 1:
        return None
    (key,) = value
    return key if key in RESERVED else None


def escape(value: Any) -> Any:
    """``value``, a plain JSON value, in the form content is held in: placeholder-shaped objects escaped.

    Every object (at any depth) whose one key is in ``RESERVED`` becomes ``{ESCAPED: object}``, so ``resolve`` gives
    it back as it was instead of looking it up. Everything else is unchanged, and a value with nothing to escape is
    returned as is (the same object), so content without such objects keeps its refs. Apply it exactly once, where
    content enters the system: escaping held content again would make its escapes data.
    """
    if isinstance(value, dict):
        items = {key: escape(item) for key, item in value.items()}
        if _reserved_key(value) is not None:
            return {ESCAPED: items}
        return value if all(items[key] is value[key] for key in value) else items
    if isinstance(value, list):
        escaped = [escape(item) for item in value]
        return value if all(new is old for new, old in zip(escaped, value, strict=True)) else escaped
    return value


def placeholder_refs(value: Any) -> Iterator[str]:
    """The refs of every placeholder in ``value`` (escaped objects are data, not placeholders)."""
    if isinstance(value, dict):
        key = _reserved_key(value)
        if key == ESCAPED:
            inner = value[ESCAPED]
            yield from placeholder_refs(list(inner.values()) if isinstance(inner, dict) else inner)
            return
        if key is not None:
            yield str(value[key])
            return
        for item in value.values():
            yield from placeholder_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from placeholder_refs(item)


def resolve(value: Any, lookup: Callable[[str], Any]) -> Any:
    """``value`` as plain JSON: every placeholder replaced by the content it stands for, every escape unwrapped.

    The inverse of ``escape`` (and of ``offload``): ``resolve(escape(x), lookup) == x`` for any JSON value ``x``.

    Args:
        value: A JSON value as held: it may hold placeholders and escapes.
        lookup: The decoded JSON value stored under a ref (held too: it may hold placeholders and escapes of its own).
    """
    if isinstance(value, dict):
        key = _reserved_key(value)
        if key == STORED:
            return resolve(lookup(value[STORED]), lookup)
        if key == ESCAPED:
            inner = value[ESCAPED]
            if isinstance(inner, dict):
                return {name: resolve(item, lookup) for name, item in inner.items()}
            return resolve(inner, lookup)
        return {name: resolve(item, lookup) for name, item in value.items()}
    if isinstance(value, list):
        items: list[Any] = []
        for item in value:
            if isinstance(item, dict) and len(item) == 1 and SPLICE in item:
                message = resolve(lookup(item[SPLICE]), lookup)
                content = message.get("content") if isinstance(message, dict) else message
                items.extend([{"type": "text", "text": content}] if isinstance(content, str) else content or [])
            else:
                items.append(resolve(item, lookup))
        return items
    return value


def offload(value: Any, limit: int = INLINE_LIMIT) -> tuple[Any, dict[str, tuple[bytes, Any]]]:
    """Replace the parts of ``value`` bigger than ``limit`` by placeholders.

    ``value`` is held content (``escape`` it first if it is plain data): the blobs are stored as given.

    A content list's blocks are offloaded one by one (each big block becomes a placeholder in the list), unless the
    list is still big after that; any other value is offloaded whole.

    Returns:
        The value to carry, and by ref each blob to store with the part of ``value`` it holds.
    """
    blobs: dict[str, tuple[bytes, Any]] = {}

    def put(item: Any) -> Any:
        data = canonical(item)
        if len(data) <= limit:
            return item
        ref = ref_for(data, short=True)  # a placeholder is in history wherever the content is carried
        blobs[ref] = (data, item)
        return stored(ref)

    if isinstance(value, list):
        items = [put(item) for item in value]
        if len(canonical(items)) <= 16 * limit:
            return items, blobs
        blobs = {}  # many small blocks that are big together: store the list whole
    return put(value), blobs


def _null_as_empty(value: object) -> object:
    return [] if value is None else value


NULL_AS_EMPTY = BeforeValidator(_null_as_empty)
"""On a list field of what a client hands back (``Run.send``'s ``continue_from``): ``null`` reads as ``[]``. The stock
``temporal`` CLI prints an empty JSON array as ``null``, so a query's answer copied from it into a new run's input
holds ``null`` wherever the run wrote ``[]``."""


class Mark(BaseModel):
    """A stored message, as the workflow remembers it."""

    role: str
    ref: str
    head: str
    """The transcript up to and including this message."""


class Transcript(BaseModel):
    """A run's messages: the ones stored (by mark) followed by the ones not stored yet (whole).

    ``offset`` messages before ``marks`` are known only through ``base`` (the head after them): a run that continued
    as new carries the last few marks, not all of them.
    """

    offset: int = 0
    base: str | None = None
    marks: Annotated[list[Mark], NULL_AS_EMPTY] = []
    pending: Annotated[list[dict[str, Any]], NULL_AS_EMPTY] = []
    # Left out of the JSON while unset, so a transcript dumps as it did before.
    short_refs: bool = Field(default=False, exclude_if=lambda short: not short)
    """Whether its model calls store messages under short references (``SHORT_PREFIX``), as runs since the
    ``lean-iteration-history`` patch do: ``store_pending`` names them so."""

    def __len__(self) -> int:
        return self.offset + len(self.marks) + len(self.pending)

    @property
    def head(self) -> str | None:
        """The head of the stored messages: what a model call reads from the store."""
        return self.marks[-1].head if self.marks else self.base

    def role(self, index: int) -> str | None:
        """The role of message ``index``, or ``None`` when only the store knows it."""
        if index < self.offset:
            return None
        index -= self.offset
        if index < len(self.marks):
            return self.marks[index].role
        return str(self.pending[index - len(self.marks)].get("role"))

    def head_at(self, length: int) -> str | None:
        """The head of the first ``length`` messages, all of them stored; ``None`` for none."""
        if length == self.offset:
            return self.base
        if not self.offset < length <= self.offset + len(self.marks):
            raise ValueError(f"the first {length} messages are not all stored and known to this run")
        return self.marks[length - self.offset - 1].head

    def store_pending(self) -> list[dict[str, Any]]:
        """Mark the pending messages stored (a model call stored them) and return them."""
        head = self.head
        stored_now = self.pending
        for message in stored_now:
            ref = message_ref(message, self.short_refs)
            head = next_head(head, ref)
            self.marks.append(Mark(role=str(message.get("role")), ref=ref, head=head))
        self.pending = []
        return stored_now

    def append(self, message: dict[str, Any]) -> None:
        """Add a message to the end, not stored yet."""
        self.pending.append(message)

    def last_pending(self) -> dict[str, Any] | None:
        """The last message, made pending if it was stored (so it can change), or ``None`` when empty."""
        if self.pending:
            return self.pending[-1]
        if not self.marks:
            return None
        mark = self.marks.pop()
        message = {"role": mark.role, "content": [splice(mark.ref)]}
        self.pending.append(message)
        return message

    def truncate(self, length: int) -> None:
        """Keep only the first ``length`` messages."""
        if length < self.offset:
            raise ValueError(
                f"message {length} is older than the run's last continue-as-new, so this run cannot cut the history "
                "there; replace the history instead"
            )
        stored_count = self.offset + len(self.marks)
        if length >= stored_count:
            self.pending = self.pending[: length - stored_count]
        else:
            self.marks = self.marks[: length - self.offset]
            self.pending = []

    def replace(self, messages: list[dict[str, Any]]) -> int:
        """Take ``messages`` as the whole history, keeping the stored prefix they share with it.

        Returns:
            How many leading messages are unchanged.
        """
        kept = 0
        head = self.base
        if self.offset == 0:
            for mark, message in zip(self.marks, messages, strict=False):
                head = next_head(head, message_ref(message, is_short(mark.ref)))
                if head != mark.head:
                    break
                kept += 1
        self.marks = self.marks[:kept]
        if kept == 0 and self.offset:
            self.offset, self.base, self.marks = 0, None, []
        self.pending = [dict(m) for m in messages[kept:]]
        return kept

    def carry(self, keep: int = 64) -> Transcript:
        """The transcript a continued-as-new run starts from: the pending messages and the last ``keep`` marks."""
        dropped = max(0, len(self.marks) - keep)
        base = self.marks[dropped - 1].head if dropped else self.base
        return Transcript(
            offset=self.offset + dropped,
            base=base,
            marks=self.marks[dropped:],
            pending=list(self.pending),
            short_refs=self.short_refs,
        )
