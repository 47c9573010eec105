"""The conversation a run holds, and the exact request body each turn sends.

This is the workflow's copy of what the SDK's ``ThreadState`` does, reduced to what a durable run needs, so that
Claude receives byte-for-byte the bodies the SDK's tool runner sends (tests/test_differential.py checks it):

- With ``thread`` on (the SDK's default) the first turn sends ``thread: {"type": "create"}`` with the whole
  history, ``system`` and ``tools``; each later turn sends ``thread: {"type": "continue", "previous_message_id": …}``
  with only the messages the server does not hold, and no ``system`` or ``tools``. After a ``pause_turn`` that is
  ``messages: []``.
- If the server lost the thread, the turn is replayed as a ``create`` with the whole history, the messages it had
  answered resent without their ``cache_control`` (each was set for the turn that first sent it).
- The SDK's other thread fallbacks (``anthropic/lib/threads/_thread_state.py``), which a run follows once it
  recorded ``thread_fallbacks``: a ``thread_unsupported_request`` rejection, or the thread lost again on the first
  ``continue`` after a replay, resends the turn without a thread and stops threading for the rest of the run (the
  SDK's ``"unthreaded"``: the whole history, its answered part without ``cache_control``); a reply a fallback
  model served (a ``fallback_message`` entry in ``usage.iterations``) is not stored by the server, so the next turn
  starts a new thread.
- With ``thread`` off every turn sends the whole history.
- The container of a reply is named in every later request, since container-bound server tools reject a follow-up
  that omits it.

Which tools a ``tool_use`` may run follows the conversation, as in the SDK (``_tool_dispatch.available_tool_names``):
a ``tool_removal`` in a ``system`` message, or in the ``tool_changes`` of a ``compaction`` block, withdraws a tool
until a later ``tool_addition`` gives it back. The workflow holds only the recent part of the history whole, so
``Conversation`` records each change with the index of the message that made it as messages are added, cut and
replaced (``tool_changes``), and folds them when a tool is about to run.

The workflow holds ``Conversation``: pure data and deterministic, with the messages by reference, so it travels
through continue-as-new, and a run's ``continue_from`` input carries it (``run_input.py``). The model call resolves
the messages and builds the request with ``build_request`` (``workflows/conversation.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import BaseModel, Field

from agent_runner.contract.transcript import NULL_AS_EMPTY, Transcript, canonical, is_placeholder, ref_for, splice
from agent_runner.contract.types import FALLBACK_CREDIT_BETA, MESSAGE_THREADS_BETA, THREAD_REPLAY_CODES, ModelTurn

THREAD_UNSUPPORTED_ERROR = "ThreadUnsupported"
"""The ``ApplicationError.type`` of a model call the API refused to thread (``error_code``
``thread_unsupported_request``): the workflow resends the turn without a thread, as the SDK does."""

THREAD_UNSUPPORTED_CODE = "thread_unsupported_request"


class ToolChange(BaseModel):
    """One ``tool_addition`` or ``tool_removal`` in the history."""

    index: int
    """The message that makes the change (over the whole run, as ``len(transcript)`` counts)."""

    name: str
    """The tool it names."""

    available: bool
    """``True`` for an addition, ``False`` for a removal."""


def _edit_content(message: dict[str, Any]) -> dict[str, Any] | None:
    """What edits added in ``message``, a message after a reply: all of it but the reply's tool results."""
    content = message.get("content")
    if message.get("role") == "system" or not isinstance(content, list):
        return message  # a system message is an edit's; a user message of text or stored apart, an injection
    kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    return {**message, "content": kept} if kept else None


def tool_changes_in(messages: Iterable[Any], start: int = 0) -> list[ToolChange]:
    """The tool changes ``messages`` make, in order, the first message being number ``start``.

    The SDK's fold (``anthropic/lib/tools/_tool_dispatch.py``, ``available_tool_names``): ``tool_addition`` and
    ``tool_removal`` blocks of ``system`` messages, and the ``tool_changes`` of ``compaction`` blocks in ``assistant``
    messages, which stand in for the system messages of the turns they summarized. A change names a tool by
    ``tool_reference`` or by ``tool_definition``; any other (an MCP reference, a future type) and anything malformed
    is ignored, as the SDK ignores it. Content stored apart (a placeholder) is not read: the run keeps the blocks it
    dispatches on inline (``agent_runner/content.py``).
    """
    changes: list[ToolChange] = []
    for offset, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        role = message.get("role")
        for block in content:
            if not isinstance(block, dict):
                continue
            if role == "system":
                candidates: Iterable[Any] = [block]
            elif role == "assistant" and block.get("type") == "compaction":
                candidates = block.get("tool_changes") or ()
            else:
                continue
            for change in candidates:
                name = _changed_tool_name(change)
                if name is not None:
                    changes.append(
                        ToolChange(index=start + offset, name=name, available=change["type"] == "tool_addition")
                    )
    return changes


def _changed_tool_name(change: Any) -> str | None:
    """The tool a ``tool_addition`` / ``tool_removal`` block names (the SDK's ``_changed_tool_name``), or ``None``."""
    if not isinstance(change, dict) or change.get("type") not in ("tool_addition", "tool_removal"):
        return None
    tool = change.get("tool")
    if not isinstance(tool, dict):
        return None
    if tool.get("type") == "tool_reference":
        name = tool.get("name")
    elif tool.get("type") == "tool_definition" and isinstance(tool.get("definition"), dict):
        # Not every definition has a name (an `mcp_toolset` has none); such a tool is never run by the runner.
        name = tool["definition"].get("name")
    else:
        return None
    return name if isinstance(name, str) else None


def served_by_fallback(message: dict[str, Any]) -> bool:
    """Whether a fallback model wrote ``message``: its ``usage.iterations`` has a ``fallback_message`` entry.

    That entry, not a ``fallback`` content block, is the API's signal (``BetaFallbackMessageIterationUsage``).
    """
    usage = message.get("usage")
    iterations = usage.get("iterations") if isinstance(usage, dict) else None
    return isinstance(iterations, list) and any(
        isinstance(i, dict) and i.get("type") == "fallback_message" for i in iterations
    )


class Conversation(BaseModel):
    """A run's history (by reference, see ``transcript.py``) and its position on the server-side thread."""

    params: dict[str, Any]
    """Request fields sent on every turn (``model``, ``max_tokens``, ``system`` …), without ``messages``."""

    tools: Annotated[list[dict[str, Any]], NULL_AS_EMPTY]
    """Tool definitions, as sent on a ``create`` (or every turn without a thread)."""

    transcript: Transcript = Transcript()
    """The whole history, as the next full-history request would carry it."""

    threading: bool = True
    """Whether turns carry a ``thread`` field at all."""

    answered: int = 0
    """How many messages the server holds on the thread (up to and including the last reply)."""

    previous_message_id: str | None = None
    """The reply the next turn continues from; ``None`` when the next turn creates a thread."""

    tool_changes: Annotated[list[ToolChange], NULL_AS_EMPTY] = []
    """Every ``tool_addition`` / ``tool_removal`` in the history, in order (see ``withdrawn_tools``)."""

    retired_tools: Annotated[list[str], NULL_AS_EMPTY] = []
    """Tools withdrawn when a compaction replaced the history that withdrew them. The SDK stops running them
    (``_register_compaction_response``) whatever the new history says; the runner's own ``add_tools`` gives one back."""

    thread_fallbacks: bool = False
    """Whether the run follows the SDK's thread fallbacks (``stop_threading`` after ``thread_unsupported_request`` or
    a thread lost again right after a replay, a new thread after a fallback model's reply). The run sets it behind
    ``workflow.patched`` where one of them first decides (``takes_thread_fallback``), so a run recorded before keeps
    the rules it ran with; carried across continue-as-new."""

    unthreaded: bool = False
    """The server could not thread this run (the SDK's ``stop_threading``): ``threading`` is off for the rest of the
    run, and each turn sends the whole history with the messages up to the last reply without ``cache_control``."""

    replaces_lost_thread: bool = False
    """The thread the next turn creates or first continues replaced one the server did not find (the SDK's
    ``New`` / ``Created`` / ``Continue.replaces_lost_thread``): if that first ``continue`` finds it lost as well, the
    server may be unable to store the conversation, and the run stops threading."""

    # Left out while undecided, so a continuation of a run that never decided carries the JSON it carried before.
    sdk_request_shape: bool | None = Field(default=None, exclude_if=lambda shape: shape is None)
    """Whether each turn's settings carry two request fields as anthropic 2.14.0's tool runner sends them, which
    runs recorded before sent otherwise: ``tools: []`` on a ``create`` (and on every turn without a thread) when the
    run has no tools, and the threads beta after the run's own ``betas`` (``_params_as_the_sdk_sends``). ``None``
    until a turn would differ; the run decides behind ``workflow.patched`` when it starts, if its first turn differs,
    else at that turn (``workflows/request_shape.py``), and keeps the answer, carried across continue-as-new and into
    a ``send``, so a run never changes mid-way."""

    @classmethod
    def start(
        cls, params: dict[str, Any], tools: list[dict[str, Any]], messages: list[dict[str, Any]], *, threading: bool
    ) -> Conversation:
        """A run's conversation before its first turn: ``messages`` may already withdraw tools."""
        return cls(
            params=params,
            tools=tools,
            transcript=Transcript(pending=copy.deepcopy(messages)),
            threading=threading,
            tool_changes=tool_changes_in(messages),
        )

    def withdrawn_tools(self, queued: Iterable[tuple[str, bool]] = ()) -> set[str]:
        """The tools a ``tool_use`` must not run: it gets ``Error: Tool 'X' not found``, as in the SDK.

        Args:
            queued: Changes the runner was asked for and has not applied yet, as ``(name, available)`` in order: like
                the SDK's ``add_tools`` / ``remove_tools``, they count for the reply being handled.
        """
        withdrawn = set(self.retired_tools)
        history: set[str] = set()
        for change in self.tool_changes:
            if change.available:
                history.discard(change.name)
            else:
                history.add(change.name)
        for name, available in queued:
            if available:
                history.discard(name)
                withdrawn.discard(name)
            else:
                history.add(name)
        return withdrawn | history

    def turn(self, compaction: dict[str, Any] | None = None, keep_from: int | None = None) -> ModelTurn:
        """What the model call needs to build the next request: settings, stored head, messages not stored yet.

        Args:
            compaction: The ``compaction`` field of a compaction request, which goes out on a new thread.
            keep_from: For a compaction that keeps recent turns (``recent_turns_start``): only the messages before
                this one are sent, to be summarized.
        """
        params = self._params_as_the_sdk_sends() if self.sdk_request_shape else self.params
        settings = {"params": params, "tools": self.tools}
        transcript = self.transcript
        head, pending, length, answered = transcript.head, transcript.pending, len(transcript), self.answered
        if keep_from is not None:
            stored = transcript.offset + len(transcript.marks)
            if keep_from <= stored:
                head, pending = transcript.head_at(keep_from), []
            else:
                pending = pending[: keep_from - stored]
            length, answered = keep_from, min(answered, keep_from)
        return ModelTurn(
            settings=settings,
            settings_ref=ref_for(canonical(settings), short=transcript.short_refs),  # as the run names what it stores
            head=head,
            pending=pending,
            length=length,
            threading=self.threading,
            answered=answered,
            previous_message_id=None if compaction is not None else self.previous_message_id,
            compaction=compaction,
        )

    def _params_as_the_sdk_sends(self) -> dict[str, Any]:
        """The run's parameters with the two fields the SDK's runner always sets (``_thread_state.create_arguments``).

        ``tools`` even when empty (``build_request`` sends the definitions only when there are some, and leaves a
        ``tools`` the parameters hold out of a ``continue``, as it leaves the definitions out), and, on a thread, the
        threads beta right after the run's own ``betas``: ``build_request`` keeps a threads beta it finds there, and
        the refusal-fallback beta goes after it (``hop_turn``), as the SDK's middleware appends it to the header.
        """
        params = dict(self.params)
        if not self.tools:
            params["tools"] = []
        betas = params.get("betas") or []
        if self.threading and MESSAGE_THREADS_BETA not in betas:
            params["betas"] = [*betas, MESSAGE_THREADS_BETA]
        return params

    def sends_otherwise_than_before(self, compaction: bool = False) -> bool:
        """Whether the next turn (a compaction, with ``compaction``) differs as the SDK sends it from before.

        It does when it sends ``tools`` (a ``create``, or any turn without a thread) and the run has none, and on a
        thread when the run's own ``betas`` hold the refusal-fallback beta (runs recorded before sent the threads
        beta ahead of it, wherever it was).
        """
        creates = compaction or not self.threading or self.previous_message_id is None
        betas = self.params.get("betas") or []
        return (creates and not self.tools) or (
            self.threading and FALLBACK_CREDIT_BETA in betas and MESSAGE_THREADS_BETA not in betas
        )

    def recent_turns_start(self, turns: int) -> int | None:
        """Where the last ``turns`` turns start: the index of the reply that begins the oldest of them.

        A turn begins with a reply of Claude's that follows a user or system message (a resumed ``pause_turn`` reply
        belongs to the turn before it), so the history before it never ends with a reply whose tool calls are
        unanswered, which the API cannot summarize.

        Returns:
            The index, or ``None`` when the history has no turn older than those (or only the store knows them).
        """
        transcript = self.transcript
        found = 0
        for index in range(len(transcript) - 1, transcript.offset, -1):
            before = transcript.role(index - 1)
            if transcript.role(index) == "assistant" and before not in (None, "assistant"):
                found += 1
                if found == turns:
                    return index
        return None

    def record_compaction(self, message: dict[str, Any], keep_from: int | None = None) -> None:
        """Replace the history by the compaction reply; the next turn starts a new thread from it.

        Args:
            message: The compaction reply.
            keep_from: The first message kept after the summary (``recent_turns_start``); ``None`` keeps none.
        """
        self.retired_tools = sorted(self.withdrawn_tools())
        kept: list[dict[str, Any]] = []
        kept_changes: list[ToolChange] = []
        if keep_from is not None:
            transcript = self.transcript
            stored = transcript.offset + len(transcript.marks)
            # Stored messages are kept by reference (their content blocks spliced from the store), so a long run
            # carries nothing new through its history.
            kept = [
                {"role": mark.role, "content": [splice(mark.ref)]}
                for mark in transcript.marks[keep_from - transcript.offset :]
            ]
            kept.extend(copy.deepcopy(transcript.pending[max(0, keep_from - stored) :]))
            # Their tool changes are known already: a spliced message cannot be read here.
            kept_changes = [
                ToolChange(index=c.index - keep_from + 1, name=c.name, available=c.available)
                for c in self.tool_changes
                if c.index >= keep_from
            ]
        self.replace_messages([{"role": "assistant", "content": message.get("content") or []}, *kept])
        if keep_from is not None:
            self.tool_changes = [*(c for c in self.tool_changes if c.index == 0), *kept_changes]
        self.answered = 0
        self.previous_message_id = None
        self.replaces_lost_thread = False

    def record_reply(self, message: dict[str, Any]) -> None:
        """Add Claude's reply to the history and continue the thread from it (the SDK's ``record_reply``).

        A refused turn is kept in the history but the thread is not continued from it, because the server may hold
        the refused turn: the next turn, if any, starts a new thread (as the SDK does). With ``thread_fallbacks``, a
        reply a fallback model served is not continued from either: the server stores no such turn.
        """
        self._append({"role": "assistant", "content": message.get("content") or []})
        container = message.get("container")
        if isinstance(container, dict) and container.get("id"):
            current = self.params.get("container")
            if current is None:
                self.params["container"] = container["id"]
            elif isinstance(current, dict) and not current.get("id"):
                self.params["container"] = {**current, "id": container["id"]}
        refused = message.get("stop_reason") == "refusal"
        if not self.threading:
            if self.unthreaded and not refused:
                self.answered = len(self.transcript)
            return
        if refused:
            if self.previous_message_id is not None:
                self.start_new_thread("refusal")
            return
        if self.previous_message_id is not None:
            # Only the first `continue` of a thread that replaced a lost one counts as "right after a replay".
            self.replaces_lost_thread = False
        self.answered = len(self.transcript)
        self.previous_message_id = str(message["id"])
        if self.thread_fallbacks and served_by_fallback(message):
            self.start_new_thread("fallback_message")

    def takes_thread_fallback(self, error_code: str, *, continuing: bool) -> bool:
        """Whether ``recover`` decides on this rejection by one of the rules ``thread_fallbacks`` turns on."""
        if error_code == THREAD_UNSUPPORTED_CODE:
            return self.threading
        return error_code == "thread_not_found" and continuing and self.replaces_lost_thread

    def recover(self, error_code: str, *, continuing: bool) -> bool:
        """Adjust to a thread rejection so the turn can be sent again (the SDK's ``ThreadState.recovers_from``).

        Args:
            error_code: The rejection's ``error.details.error_code``.
            continuing: Whether the rejected request was a ``continue`` (a compaction request never is).

        Returns:
            Whether the turn should be sent again; ``False`` leaves the run to fail with the API's error.
        """
        if error_code in THREAD_REPLAY_CODES and continuing:
            if error_code == "thread_not_found" and self.replaces_lost_thread and self.thread_fallbacks:
                self.stop_threading()
            else:
                self.start_new_thread(error_code)
            return True
        if error_code == THREAD_UNSUPPORTED_CODE and self.threading and self.thread_fallbacks:
            self.stop_threading()
            return True
        return False

    def append_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add a user message holding ``blocks`` (such as tool results) after the last reply."""
        self._append({"role": "user", "content": blocks})

    def join_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``blocks`` to the next user message: the last message if it is the user's, else a new one.

        This is where an injected message goes, so a history never holds two user messages in a row.
        """
        self._join("user", blocks)

    def append_system_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``tool_addition`` / ``tool_removal`` blocks in a ``system`` message after the last message.

        Changes made before the next turn share one message, as the SDK sends them. They are the runner's own, so an
        addition also gives back a tool a compaction retired (the SDK's ``add_tools`` registers it again).
        """
        added = {c.name for c in tool_changes_in([{"role": "system", "content": blocks}]) if c.available}
        self.retired_tools = [name for name in self.retired_tools if name not in added]
        self._join("system", blocks)

    def _join(self, role: str, blocks: list[dict[str, Any]]) -> None:
        length = len(self.transcript)
        if length > self.answered and self.transcript.role(length - 1) == role:
            last = self.transcript.last_pending()
            assert last is not None
            # A content stored apart (a long text the client sent) is a placeholder, not text or blocks the blocks
            # could join: they get a message of their own, which the API takes as the same turn.
            if set(last) == {"role", "content"} and not is_placeholder(last["content"]):
                content = last["content"]
                existing = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
                last["content"] = [*existing, *blocks]
                self.tool_changes.extend(tool_changes_in([{"role": role, "content": blocks}], start=length - 1))
                return
            # A system message with more than content (`output_config`, `clear_at`) is the client's: the blocks
            # would change what it means, so they get a message of their own.
        self._append({"role": role, "content": blocks})

    def _append(self, message: dict[str, Any]) -> None:
        self.tool_changes.extend(tool_changes_in([message], start=len(self.transcript)))
        self.transcript.append(message)
        # Messages older than the last continue-as-new can only be replaced all at once, never cut one by one: of
        # their changes only each tool's last one matters, so a long run carries no more than one per tool.
        older = [c for c in self.tool_changes if c.index < self.transcript.offset]
        if len(older) > len({c.name for c in older}):
            self.tool_changes = [*{c.name: c for c in older}.values(), *self.tool_changes[len(older) :]]

    def replace_messages(self, messages: list[dict[str, Any]]) -> int:
        """Take ``messages`` as the history. Unless they keep everything the server holds, start a new thread.

        Returns:
            How many leading messages are unchanged.
        """
        kept = self.transcript.replace(copy.deepcopy(messages))
        self.tool_changes = [c for c in self.tool_changes if c.index < kept]
        self.tool_changes.extend(tool_changes_in(messages[kept:], start=kept))
        if kept < self.answered:
            self.answered = 0
            self.previous_message_id = None
            self.replaces_lost_thread = False
        return kept

    def drop_last_reply(self, keep_edits: Callable[[], bool] = lambda: False) -> bool:
        """Remove Claude's last reply and everything after it, so the turn is sent again.

        Args:
            keep_edits: Asked only when edits added content after the reply (an injected message, tool changes'
                system messages): whether that content is kept, after the messages before the reply, so an edit
                accepted before the retry is not lost with the reply. The reply's tool results never are.

        Returns:
            Whether there was a reply to remove.

        Raises:
            ValueError: The last reply is older than the run's last continue-as-new.
        """
        for i in range(len(self.transcript) - 1, -1, -1):
            role = self.transcript.role(i)
            if role is None:
                raise ValueError("the last reply is older than the run's last continue-as-new")
            if role == "assistant":
                pending = self.transcript.pending
                after = pending[len(pending) - min(len(self.transcript) - i - 1, len(pending)) :]  # never sent
                edits = [m for m in map(_edit_content, after) if m is not None]
                self.transcript.truncate(i)
                self.tool_changes = [c for c in self.tool_changes if c.index < i]
                if i < self.answered:
                    self.answered = 0
                    self.previous_message_id = None
                    self.replaces_lost_thread = False
                if edits and keep_edits():
                    for message in edits:
                        if set(message) == {"role", "content"} and isinstance(message["content"], list):
                            self._join(message["role"], message["content"])
                        else:  # content stored apart, or a system message with more than content: kept whole
                            self._append(message)
                return True
        return False

    def start_new_thread(self, reason: str | None = None) -> None:
        """Replay the whole history as a ``create`` on the next turn: the server lost, refused or did not store it.

        Args:
            reason: Why (the SDK's ``NewThreadReason``): ``thread_not_found`` marks the new thread as replacing a lost
                one.
        """
        self.previous_message_id = None
        self.replaces_lost_thread = reason == "thread_not_found"

    def stop_threading(self) -> None:
        """Send this turn and every later one with the whole history and no ``thread`` (the SDK's "unthreaded")."""
        if self.threading:
            self.threading = False
            self.unthreaded = True
            self.previous_message_id = None
            self.replaces_lost_thread = False
