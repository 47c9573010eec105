"""The workflow's own state: one `RunState`, carried whole; queued edits parsed once; the SDK's stop rules.

These check workflow internals without a server; the runs that use them are checked end to end elsewhere (and
`tests/test_replay.py` replays runs recorded before this state model existed).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import pytest
from anthropic.lib.tools._beta_runner import _determine_next_step_from_stop_reason
from anthropic.types.beta import BetaStopReason
from pydantic import TypeAdapter, ValidationError

from agent_runner.contract.steering import (
    ADD_TOOLS_UPDATE,
    COMPACT_UPDATE,
    INJECT_MESSAGE_UPDATE,
    REMOVE_TOOLS_UPDATE,
    REPLACE_HISTORY_UPDATE,
    RETRY_TURN_UPDATE,
    UPDATE_PARAMS_UPDATE,
    AddTools,
    Compact,
    InjectMessage,
    RemoveTools,
    ReplaceHistory,
    RetryTurn,
    UpdateParams,
)
from agent_runner.workflows.agent_run import next_step
from agent_runner.workflows.carry import Carried
from agent_runner.workflows.edits import QueuedEdit
from agent_runner.workflows.state import RunState

HISTORIES = Path(__file__).parent / "histories"
QUEUED: TypeAdapter[Any] = TypeAdapter(QueuedEdit)

# Queued edits as runs before the union carried them to their continuations: the update's payload, dumped.
OLD_QUEUED = [
    (INJECT_MESSAGE_UPDATE, {"content": "And Lyon?", "expected_version": 3}, InjectMessage),
    (INJECT_MESSAGE_UPDATE, {"content": [{"type": "text", "text": "hi"}], "expected_version": None}, InjectMessage),
    (RETRY_TURN_UPDATE, {"expected_version": None}, RetryTurn),
    (REPLACE_HISTORY_UPDATE, {"messages": [{"role": "user", "content": "x"}], "expected_version": 2}, ReplaceHistory),
    (UPDATE_PARAMS_UPDATE, {"params": {"max_tokens": 10, "system": None}}, UpdateParams),
    (ADD_TOOLS_UPDATE, {"tools": ["get_time", {"name": "raw", "input_schema": {"type": "object"}}]}, AddTools),
    (REMOVE_TOOLS_UPDATE, {"names": ["get_time"]}, RemoveTools),
    (COMPACT_UPDATE, {"compaction": {"type": "summarize"}, "keep_recent_turns": 1}, Compact),
]


@pytest.mark.parametrize(
    ("kind", "payload", "model"), OLD_QUEUED, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(OLD_QUEUED)]
)
def test_a_queued_edit_older_runs_carried_is_parsed_once_into_its_kind_and_dumps_as_it_was(
    kind: str, payload: dict[str, Any], model: type[Any]
) -> None:
    old = {"seq": 4, "kind": kind, "payload": payload, "edits_applied": 1}
    edit = QUEUED.validate_python(old)
    assert type(edit.payload) is model and edit.payload == model.model_validate(payload)
    assert QUEUED.dump_python(edit, mode="json") == old


def test_a_queued_edit_of_an_unknown_kind_or_a_payload_not_of_its_kind_does_not_load() -> None:
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        QUEUED.validate_python({"seq": 1, "kind": "stop", "payload": {}})
    with pytest.raises(ValidationError, match="names"):
        QUEUED.validate_python({"seq": 1, "kind": REMOVE_TOOLS_UPDATE, "payload": {"tools": ["get_time"]}})


def _continued(history: str) -> dict[str, Any]:
    """The `continued` state in the input of a recorded continuation's first event."""
    events = json.loads((HISTORIES / history).read_text())["events"]
    payload = events[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    continued: dict[str, Any] = json.loads(base64.b64decode(payload["data"]))["continued"]
    return continued


def test_a_continuation_the_code_before_run_state_started_loads_whole_and_carries_the_same_json() -> None:
    """Recorded by the code before `RunState`: an approval with edited input, an injected message, a compaction."""
    continued = _continued("before_state_model_2026_12_continued.json")
    carried = Carried.model_validate(continued)
    assert carried.model_dump(mode="json") == continued
    state = carried.state()
    assert type(state) is RunState
    assert (state.reply_count, state.compactions, state.iterations) == (2, 1, 1)
    assert (state.version, state.edits_applied, state.next_seq, state.continuations) == (3, 1, 1, 1)
    assert [r["stop_reason"] for r in state.replies] == ["tool_use", "compaction"]
    assert state.fork_points[1] is None and state.fork_points[0] is not None
    assert state.registered == ["get_time", "get_weather", "send_once"]
    assert set(Carried.model_fields) == set(RunState.model_fields) | {"model_task_queue", "stream"}


def test_iterations_count_replies_but_compactions_over_the_whole_run() -> None:
    state = RunState(
        started_at=datetime(2026, 12, 1, tzinfo=UTC),
        replies=[{"stop_reason": "compaction"}, {"stop_reason": "tool_use"}],
        reply_offset=5,
        compactions=2,
    )
    assert (state.reply_count, state.iterations) == (7, 5)
    assert state.last_reply == {"stop_reason": "tool_use"}


@pytest.mark.parametrize("stop_reason", [*get_args(BetaStopReason), None, "a_stop_reason_from_the_future"])
def test_the_next_step_for_each_stop_reason_is_the_sdks(stop_reason: Any) -> None:
    assert next_step(stop_reason) == _determine_next_step_from_stop_reason(stop_reason)
