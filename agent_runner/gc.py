"""Retention for the content store: remove what no run references any more (``agent-runner store gc``).

A blob or chain node is kept when either is true:

- **A run that still counts references it.** Runs that count are those open, and those closed within the retention
  period, as Temporal's visibility lists them (every ``AgentRun`` of the namespace, whatever its task queue). A run
  references every reference (``sha256:`` or short, ``~``) its history's payloads name (decrypted with the codec
  when encryption is on: run input, activity inputs and results, edits, continue-as-new state) and the heads its
  model calls produced, which the workflow computes itself and so never writes to history (``contract/transcript.py``,
  ``next_head``).
  From those roots the mark follows chains to their root and reads every kept blob for the placeholders it holds.
- **It was written recently.** The store stamps each blob and node each time it is written (putting content that is
  already there stamps it again), and nothing written within ``max(retention, grace)`` before the collection started
  is removed. A model call or a tool stores content before its result reaches history, and a client stores a run's
  big input before starting it: such content is referenced by no history yet, and is kept because it is fresh.
  ``grace`` (default an hour) keeps that promise when the retention is shorter than an activity can take.

That makes a collection safe while runs are live: content a live run needs is either named by its history when the
collection reads it, or written (again) after the collection started, or within the window before. Each deletion
checks the stamp again, so content stored again while the sweep runs stays. One race remains: forking from a run
that is past the retention (whose content is being removed) can fail with ``BlobMissing``; fork before that.

Histories are read in full, and every kept blob once, so a collection reads the whole live store: run it from time
to time (a cron job), not in a loop.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.service import RPCError, RPCStatusCode

from agent_runner.codec import ENCODING, KEYS_ENV, EncryptionCodec
from agent_runner.connection import no_namespace
from agent_runner.contract.errors import ConfigurationError
from agent_runner.contract.lean import full_output_json
from agent_runner.contract.tool_result_refs import whole_pending
from agent_runner.contract.transcript import message_ref, next_head
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, WORKFLOW_TYPE
from agent_runner.store import BlobMissing, ContentStore, Swept

DEFAULT_GRACE = timedelta(hours=1)
"""Content written this recently is kept whatever the retention: an activity may not have reported it yet."""

_REF = re.compile(rb"sha256:[0-9a-f]{64}|~[A-Za-z0-9_-]{22}(?![A-Za-z0-9_-])")
"""A reference in either form (``contract/transcript.py``: ``ref_for``, ``SHORT_PREFIX``)."""
_READ_CHUNK = 16
"""Blobs read at once to look for the references they hold; blobs run to megabytes."""
_HISTORIES_AT_ONCE = 8


@dataclass(frozen=True)
class Collected:
    """What a collection found and removed.

    Attributes:
        runs: Runs whose content was kept (open, or closed within the retention).
        kept_blobs: Blobs those runs reference.
        kept_nodes: Chain nodes those runs reference.
        removed: What was removed (in a dry run: what would have been).
        dry_run: Whether nothing was removed.
    """

    runs: int
    kept_blobs: int
    kept_nodes: int
    removed: Swept
    dry_run: bool

    def summary(self) -> str:
        """One line for a person: ``removed 3 blobs (12345 bytes) and 4 chain nodes; kept ...``."""
        verb = "would remove" if self.dry_run else "removed"
        swept = self.removed
        return (
            f"{verb} {swept.blobs} blobs ({swept.blob_bytes} bytes) and {swept.nodes} chain nodes; kept "
            f"{self.kept_blobs} blobs and {self.kept_nodes} chain nodes referenced by {self.runs} runs, and what "
            "was written within the retention"
        )


async def collect_garbage(
    client: Client,
    store: ContentStore,
    *,
    retention: timedelta,
    grace: timedelta = DEFAULT_GRACE,
    dry_run: bool = False,
    no_runs_ok: bool = False,
) -> Collected:
    """Remove from ``store`` what no run that still counts references, and that was not written recently.

    Args:
        client: A client of the Temporal namespace the runs live in, with the runs' data converter (its codec
            decrypts their histories).
        store: The store the runs' workers use (``open_store``).
        retention: How long content outlives the run that last referenced it, and how long any write is kept.
        grace: Content written within this is kept even when the retention is shorter.
        dry_run: Count what would be removed, remove nothing.
        no_runs_ok: Go on when Temporal lists no run at all though there is content to remove. Without it that is
            refused: a client of the wrong server or namespace lists none, and would remove what every run needs.

    Returns:
        What was kept and removed.

    Raises:
        ConfigurationError: A run's history is encrypted and the client has no codec for it; the namespace does not
            exist; or no run is listed, there is content to remove and ``no_runs_ok`` is false.
        StoreError: The store failed, or cannot be swept.
    """
    # Taken first: whatever is written from now on, or within the window before, stays (see the module docstring).
    started = await store.clock()
    closed_after = datetime.now(UTC) - retention
    query = (
        f"WorkflowType = '{WORKFLOW_TYPE}' AND (ExecutionStatus = 'Running' OR "
        f"CloseTime > '{closed_after.isoformat().replace('+00:00', 'Z')}')"
    )
    where = f"namespace {client.namespace!r} at {client.service_client.config.target_host}"
    if not client.namespace:  # TEMPORAL_NAMESPACE set empty; Temporal would answer only "Namespace is empty."
        raise no_namespace(client)
    try:
        runs = [(execution.id, execution.run_id) async for execution in client.list_workflows(query)]
    except RPCError as e:
        if e.status != RPCStatusCode.NOT_FOUND:
            raise
        raise no_namespace(client) from e
    codec = client.data_converter.payload_codec
    if isinstance(codec, EncryptionCodec):
        codec.warn_plaintext = False  # gc reads every history: those of runs from before encryption are no news
    gate = asyncio.Semaphore(_HISTORIES_AT_ONCE)

    async def roots_of(workflow_id: str, run_id: str) -> list[str]:
        async with gate:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        return await history_refs(history.events, codec, run=workflow_id)

    roots: list[str] = []
    for found in await asyncio.gather(*(roots_of(workflow_id, run_id) for workflow_id, run_id in runs)):
        roots.extend(found)
    blobs, heads = await _mark(store, roots)
    window = max(retention, grace).total_seconds()
    if not runs and not no_runs_ok:
        unclaimed = await store.sweep(blobs, heads, written_before=started - window, dry_run=True)
        if unclaimed.blobs or unclaimed.nodes:
            raise ConfigurationError(
                f"Temporal lists no runs in {where}, so gc would remove all {unclaimed.blobs} blobs and "
                f"{unclaimed.nodes} chain nodes written before the retention: check that TEMPORAL_ADDRESS and "
                "TEMPORAL_NAMESPACE name the server and namespace the workers use, or pass --no-runs-ok if no run "
                "needs this content."
            )
    swept = await store.sweep(blobs, heads, written_before=started - window, dry_run=dry_run)
    return Collected(runs=len(runs), kept_blobs=len(blobs), kept_nodes=len(heads), removed=swept, dry_run=dry_run)


async def history_refs(
    events: Iterable[HistoryEvent], codec: PayloadCodec | None = None, *, run: str = "a run"
) -> list[str]:
    """The references a run's history names, and the heads its model calls produced, in history order.

    Args:
        events: The run's history events, their payloads as Temporal keeps them.
        codec: Decodes (decrypts) the payloads; ``None`` when they are not encoded.
        run: The run's id, for the error.

    Raises:
        ConfigurationError: A payload is encrypted and ``codec`` is ``None``.
    """
    refs: list[str] = []
    scheduled: dict[int, dict[str, Any]] = {}
    for event in events:
        payloads = list(_payloads(event))
        if not payloads:
            continue
        decoded = await codec.decode(payloads) if codec is not None else payloads
        if any(payload.metadata.get("encoding") == ENCODING for payload in decoded):
            raise ConfigurationError(
                f"The history of {run} is encrypted: set {KEYS_ENV} to the workers' keys, so that gc can see what "
                "the run references."
            )
        for payload in decoded:
            refs.extend(match.decode() for match in _REF.findall(payload.data))
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == CREATE_MESSAGE_ACTIVITY:
                scheduled[event.event_id] = await _first_json(attributes.input.payloads, codec)
        elif event.HasField("activity_task_completed_event_attributes"):
            completed = event.activity_task_completed_event_attributes
            call = scheduled.get(completed.scheduled_event_id)
            if call is not None:
                refs.extend(_heads_produced(call, await _first_json(completed.result.payloads, codec)))
    return list(dict.fromkeys(refs))


async def _first_json(payloads: Sequence[Payload], codec: PayloadCodec | None) -> dict[str, Any]:
    if not payloads:
        return {}
    decoded = await codec.decode(payloads[:1]) if codec is not None else payloads[:1]
    try:
        value = json.loads(decoded[0].data)
    except ValueError:  # not JSON: not a model call's input or output, so it produced no heads
        return {}
    return value if isinstance(value, dict) else {}


def _heads_produced(call: dict[str, Any], output: dict[str, Any]) -> list[str]:
    """The transcript and replies heads a model call stored, as the workflow computes them (``store_pending``)."""
    turn = call.get("turn")
    lean = isinstance(turn, dict) and "length" not in turn
    if lean:
        output = full_output_json(output)  # a lean result (``contract/lean.py``): the reply the call stored
    message = output.get("message")
    if not output.get("stored") or not isinstance(turn, dict) or not isinstance(message, dict):
        return []
    heads = []
    head = turn.get("head")
    for stored in [*whole_pending(turn), {"role": "assistant", "content": message.get("content") or []}]:
        head = next_head(head, message_ref(stored, lean))  # a lean call names them short
        heads.append(head)
    heads.append(next_head(call.get("replies_head"), message_ref(message, lean)))
    return heads


def _payloads(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` in a protobuf message, at any depth: inputs, results, failures' encoded attributes, ..."""
    for _, value in message.ListFields():
        if isinstance(value, Payload):
            yield value
        elif isinstance(value, Message):
            yield from _payloads(value)
        elif isinstance(value, str | bytes | int | float | bool):
            continue
        else:  # a repeated field or a map
            for item in value.values() if hasattr(value, "values") else value:
                if isinstance(item, Payload):
                    yield item
                elif isinstance(item, Message):
                    yield from _payloads(item)


async def _mark(store: ContentStore, roots: Sequence[str]) -> tuple[set[str], set[str]]:
    """The blobs and chain heads reachable from ``roots``: chains to their root, blobs to what they name."""
    blobs: set[str] = set()
    heads: set[str] = set()
    wanted = list(reversed(roots))  # newest first: a run's last head walks the chain its earlier heads are part of
    while wanted:
        maybe_blobs: list[str] = []
        for name in dict.fromkeys(wanted):
            if name in heads or name in blobs:
                continue
            try:
                messages = await store.chain(name)
            except BlobMissing as error:
                # Not a node (a blob's reference, or something this store never held); a chain whose ancestor is
                # gone cannot be read by any run, so there is nothing of it to keep.
                if error.refs == (name,):
                    maybe_blobs.append(name)
                continue
            head: str | None = None
            for ref in messages:
                head = next_head(head, ref)
                heads.add(head)
            heads.add(name)  # a chain that does not hash to its head is refused on use, but not removed here
            maybe_blobs.extend(messages)
        wanted = []
        fresh = [ref for ref in dict.fromkeys(maybe_blobs) if ref not in blobs]
        for start in range(0, len(fresh), _READ_CHUNK):
            # _read, not get: what is missing is simply not kept, and a corrupted blob is still looked into.
            found = await store._read(fresh[start : start + _READ_CHUNK])
            for ref, data in found.items():
                blobs.add(ref)
                wanted.extend(match.decode() for match in _REF.findall(data))
        wanted = [name for name in wanted if name not in blobs and name not in heads]
    return blobs, heads
