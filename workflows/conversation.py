"""The conversation a run holds, and the exact request body each turn sends.

This is the workflow's copy of what the SDK's ``ThreadState`` does, reduced to what a durable run needs, so that
Claude receives byte-for-byte the bodies the SDK's tool runner sends (tests/test_differential.py checks it):

- With ``thread`` on (the SDK's default) the first turn sends ``thread: {"type": "create"}`` with the whole
  history, ``system`` and ``tools``; each later turn sends ``thread: {"type": "continue", "previous_message_id": …}``
  with only the messages the server does not hold, and no ``system`` or ``tools``. After a ``pause_turn`` that is
  ``messages: []``.
- If the server lost the thread, the turn is replayed as a ``create`` with the whole history, the messages it had
  answered resent without their ``cache_control`` (each was set for the turn that first sent it).
- With ``thread`` off every turn sends the whole history.
- The container of a reply is named in every later request, since container-bound server tools reject a follow-up
  that omits it.

The workflow holds ``Conversation``: pure data and deterministic, with the messages by reference, so it travels
through continue-as-new. The model call resolves the messages and builds the request with ``build_request``.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from workflows.transcript import Transcript, canonical, ref_for
from workflows.types import MESSAGE_THREADS_BETA, ModelTurn

CREATE_ONLY_FIELDS = ("system", "tools")
"""Fields the server takes from the thread on a ``continue``, and rejects if the request repeats them."""

_KEYS_THAT_HOLD_BLOCKS = ("content", "source", "tool", "definition", "tool_references")


def build_request(
    params: dict[str, Any],
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    *,
    threading: bool,
    answered: int,
    previous_message_id: str | None,
) -> dict[str, Any]:
    """The keyword arguments of ``client.beta.messages.create`` for a turn over the whole, resolved history."""
    request: dict[str, Any] = copy.deepcopy(params)
    extra_body = {k: request.pop(k) for k in ("temperature", "top_k", "top_p") if k in request}
    if extra_body:
        request["extra_body"] = extra_body
    if tools:
        request["tools"] = copy.deepcopy(tools)
    if not threading:
        request["messages"] = copy.deepcopy(messages)
        return request
    betas = list(request.get("betas") or [])
    if MESSAGE_THREADS_BETA not in betas:
        betas.append(MESSAGE_THREADS_BETA)
    request["betas"] = betas
    if previous_message_id is not None:
        request["thread"] = {"type": "continue", "previous_message_id": previous_message_id}
        request["messages"] = copy.deepcopy(messages[answered:])
        for field in CREATE_ONLY_FIELDS:
            request.pop(field, None)
    else:
        request["thread"] = {"type": "create"}
        request["messages"] = [
            *(_without_cache_control(m) for m in messages[:answered]),
            *copy.deepcopy(messages[answered:]),
        ]
    return request


def compaction_params(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of a compaction request (the SDK's ``compact_before_next_turn``).

    It goes out on a new thread with the full history, without the parameters a compaction request cannot carry:
    ``context_management``, ``stop_sequences``, ``output_format``, a ``tool_choice`` that forces a tool, and
    ``output_config.format``.
    """
    kept = {
        k: copy.deepcopy(v)
        for k, v in params.items()
        if k not in ("context_management", "stop_sequences", "output_format")
    }
    if isinstance(kept.get("tool_choice"), dict) and kept["tool_choice"].get("type") in ("any", "tool"):
        del kept["tool_choice"]
    if isinstance(kept.get("output_config"), dict):
        kept["output_config"] = {k: v for k, v in kept["output_config"].items() if k != "format"}
        if not kept["output_config"]:
            del kept["output_config"]
    return kept


class Conversation(BaseModel):
    """A run's history (by reference, see ``transcript.py``) and its position on the server-side thread."""

    params: dict[str, Any]
    """Request fields sent on every turn (``model``, ``max_tokens``, ``system`` …), without ``messages``."""

    tools: list[dict[str, Any]]
    """Tool definitions, as sent on a ``create`` (or every turn without a thread)."""

    transcript: Transcript = Transcript()
    """The whole history, as the next full-history request would carry it."""

    threading: bool = True
    """Whether turns carry a ``thread`` field at all."""

    answered: int = 0
    """How many messages the server holds on the thread (up to and including the last reply)."""

    previous_message_id: str | None = None
    """The reply the next turn continues from; ``None`` when the next turn creates a thread."""

    def turn(self, compaction: dict[str, Any] | None = None) -> ModelTurn:
        """What the model call needs to build the next request: settings, stored head, messages not stored yet."""
        settings = {"params": self.params, "tools": self.tools}
        return ModelTurn(
            settings=settings,
            settings_ref=ref_for(canonical(settings)),
            head=self.transcript.head,
            pending=self.transcript.pending,
            length=len(self.transcript),
            threading=self.threading,
            answered=self.answered,
            previous_message_id=None if compaction is not None else self.previous_message_id,
            compaction=compaction,
        )

    def record_compaction(self, message: dict[str, Any]) -> None:
        """Replace the history by the compaction reply; the next turn starts a new thread from it."""
        self.replace_messages([{"role": "assistant", "content": message.get("content") or []}])
        self.answered = 0
        self.previous_message_id = None

    def record_reply(self, message: dict[str, Any]) -> None:
        """Add Claude's reply to the history and continue the thread from it.

        A refused turn is kept in the history but the thread is not continued from it, because the server may hold
        the refused turn: the next turn, if any, starts a new thread (as the SDK does).
        """
        self.transcript.append({"role": "assistant", "content": message.get("content") or []})
        container = message.get("container")
        if isinstance(container, dict) and container.get("id"):
            current = self.params.get("container")
            if current is None:
                self.params["container"] = container["id"]
            elif isinstance(current, dict) and not current.get("id"):
                self.params["container"] = {**current, "id": container["id"]}
        if not self.threading:
            return
        if message.get("stop_reason") == "refusal":
            self.start_new_thread()
            return
        self.answered = len(self.transcript)
        self.previous_message_id = str(message["id"])

    def append_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add a user message holding ``blocks`` (such as tool results) after the last reply."""
        self.transcript.append({"role": "user", "content": blocks})

    def join_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``blocks`` to the next user message: the last message if it is the user's, else a new one.

        This is where an injected message goes, so a history never holds two user messages in a row.
        """
        self._join("user", blocks)

    def append_system_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``tool_addition`` / ``tool_removal`` blocks in a ``system`` message after the last message.

        Changes made before the next turn share one message, as the SDK sends them.
        """
        self._join("system", blocks)

    def _join(self, role: str, blocks: list[dict[str, Any]]) -> None:
        length = len(self.transcript)
        if length > self.answered and self.transcript.role(length - 1) == role:
            last = self.transcript.last_pending()
            assert last is not None
            content = last["content"]
            existing = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            last["content"] = [*existing, *blocks]
        else:
            self.transcript.append({"role": role, "content": blocks})

    def replace_messages(self, messages: list[dict[str, Any]]) -> int:
        """Take ``messages`` as the history. Unless they keep everything the server holds, start a new thread.

        Returns:
            How many leading messages are unchanged.
        """
        kept = self.transcript.replace(copy.deepcopy(messages))
        if kept < self.answered:
            self.answered = 0
            self.previous_message_id = None
        return kept

    def drop_last_reply(self) -> bool:
        """Remove Claude's last reply and everything after it, so the turn is sent again.

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
                self.transcript.truncate(i)
                if i < self.answered:
                    self.answered = 0
                    self.previous_message_id = None
                return True
        return False

    def start_new_thread(self) -> None:
        """Replay the whole history as a ``create`` on the next turn: the server lost or refused the thread."""
        self.previous_message_id = None


def _without_cache_control(value: Any) -> Any:
    """A copy of ``value`` without the ``cache_control`` of any block in it.

    Only the keys that hold blocks are followed, so a tool's free-form ``input`` stays as it is.
    """
    if isinstance(value, dict):
        return {
            key: _without_cache_control(item) if key in _KEYS_THAT_HOLD_BLOCKS else copy.deepcopy(item)
            for key, item in value.items()
            if key != "cache_control"
        }
    if isinstance(value, list):
        return [_without_cache_control(item) for item in value]
    return value
