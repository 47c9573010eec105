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

It is pure data and deterministic, so the workflow can hold it and a later version can carry it through
continue-as-new.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from workflows.types import MESSAGE_THREADS_BETA

CREATE_ONLY_FIELDS = ("system", "tools")
"""Fields the server takes from the thread on a ``continue``, and rejects if the request repeats them."""

_KEYS_THAT_HOLD_BLOCKS = ("content", "source", "tool", "definition", "tool_references")


class Conversation(BaseModel):
    """A run's history and its position on the server-side thread."""

    params: dict[str, Any]
    """Request fields sent on every turn (``model``, ``max_tokens``, ``system`` …), without ``messages``."""

    tools: list[dict[str, Any]]
    """Tool definitions, as sent on a ``create`` (or every turn without a thread)."""

    messages: list[dict[str, Any]]
    """The whole history, as the next full-history request would carry it."""

    threading: bool = True
    """Whether turns carry a ``thread`` field at all."""

    answered: int = 0
    """How many messages of ``messages`` the server holds on the thread (up to and including the last reply)."""

    previous_message_id: str | None = None
    """The reply the next turn continues from; ``None`` when the next turn creates a thread."""

    def request(self) -> dict[str, Any]:
        """The keyword arguments of ``client.beta.messages.create`` for the next turn."""
        request: dict[str, Any] = copy.deepcopy(self.params)
        extra_body = {k: request.pop(k) for k in ("temperature", "top_k", "top_p") if k in request}
        if extra_body:
            request["extra_body"] = extra_body
        if self.tools:
            request["tools"] = copy.deepcopy(self.tools)
        if not self.threading:
            request["messages"] = copy.deepcopy(self.messages)
            return request
        betas = list(request.get("betas") or [])
        if MESSAGE_THREADS_BETA not in betas:
            betas.append(MESSAGE_THREADS_BETA)
        request["betas"] = betas
        if self.previous_message_id is not None:
            request["thread"] = {"type": "continue", "previous_message_id": self.previous_message_id}
            request["messages"] = copy.deepcopy(self.messages[self.answered :])
            for field in CREATE_ONLY_FIELDS:
                request.pop(field, None)
        else:
            request["thread"] = {"type": "create"}
            answered = [_without_cache_control(m) for m in self.messages[: self.answered]]
            request["messages"] = [*answered, *copy.deepcopy(self.messages[self.answered :])]
        return request

    def compaction_request(self, compaction: dict[str, Any]) -> dict[str, Any]:
        """The request that summarizes the whole history (the SDK's ``compact_before_next_turn``).

        It goes out on a new thread with the full history, without the parameters a compaction request cannot
        carry: ``context_management``, ``stop_sequences``, ``output_format``, a ``tool_choice`` that forces a tool,
        and ``output_config.format``.
        """
        params = {
            k: copy.deepcopy(v)
            for k, v in self.params.items()
            if k not in ("context_management", "stop_sequences", "output_format")
        }
        if isinstance(params.get("tool_choice"), dict) and params["tool_choice"].get("type") in ("any", "tool"):
            del params["tool_choice"]
        if isinstance(params.get("output_config"), dict):
            params["output_config"] = {k: v for k, v in params["output_config"].items() if k != "format"}
            if not params["output_config"]:
                del params["output_config"]
        fork = self.model_copy(update={"params": params, "previous_message_id": None}, deep=True)
        return {**fork.request(), "compaction": copy.deepcopy(compaction)}

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
        self.messages.append({"role": "assistant", "content": message.get("content") or []})
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
        self.answered = len(self.messages)
        self.previous_message_id = str(message["id"])

    def append_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add a user message holding ``blocks`` (such as tool results) after the last reply."""
        self.messages.append({"role": "user", "content": blocks})

    def join_user_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``blocks`` to the next user message: the last message if it is the user's, else a new one.

        This is where an injected message goes, so a history never holds two user messages in a row.
        """
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "user" and len(self.messages) > self.answered:
            content = last["content"]
            existing = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            last["content"] = [*existing, *blocks]
        else:
            self.messages.append({"role": "user", "content": blocks})

    def append_system_content(self, blocks: list[dict[str, Any]]) -> None:
        """Add ``tool_addition`` / ``tool_removal`` blocks in a ``system`` message after the last message.

        Changes made before the next turn share one message, as the SDK sends them.
        """
        last = self.messages[-1] if self.messages else None
        if last is not None and last.get("role") == "system" and len(self.messages) > self.answered:
            last["content"] = [*last["content"], *blocks]
        else:
            self.messages.append({"role": "system", "content": blocks})

    def replace_messages(self, messages: list[dict[str, Any]]) -> None:
        """Take ``messages`` as the history. Unless they keep everything the server holds, start a new thread."""
        held = self.messages[: self.answered]
        self.messages = copy.deepcopy(messages)
        if messages[: len(held)] != held:
            self.answered = 0
            self.previous_message_id = None

    def drop_last_reply(self) -> bool:
        """Remove Claude's last reply and everything after it, so the turn is sent again.

        Returns:
            Whether there was a reply to remove.
        """
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].get("role") == "assistant":
                self.replace_messages(self.messages[:i])
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
