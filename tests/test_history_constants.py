"""What a run costs its history once, whatever its length, with a realistic tool (issue 14).

A real tool's input schema is 1-5 KB. A worker's ``describe_tools`` stores every field of a tool's definition over
``DESCRIBED_TOOL_FIELD_LIMIT`` and answers with its placeholder (``contract/big_params.py``), so neither the lookup's
answer nor the first model call's settings carry the schema; the model call puts it back, so Claude receives the
definition exactly. And a turn whose tool results are all stored apart sends them as ``[tool_use_id, ref]`` pairs
(``contract/tool_result_refs.py``): Claude receives the very same ``tool_result`` blocks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic import beta_tool
from temporalio.client import WorkflowHistory

from agent_runner.client import AgentRunner
from agent_runner.contract.big_params import DESCRIBED_TOOL_FIELD_LIMIT
from agent_runner.contract.tool_result_refs import compact_results, compact_turn, whole_pending, whole_turn
from agent_runner.contract.transcript import canonical, ref_for, stored
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, ModelTurn
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows.patches import COMPACT_RESULTS_PATCH
from tests.conftest import WorkerFactory
from tests.test_history_size import payloads
from tests.test_lean_history import queue_as_long_as_the_default
from tests.test_umbrella_patch import markers, per_run_bytes

BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024}
CALLS = 6
RESULT = "r" * 1000
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        f"field_{i:02}": {"type": "string", "description": f"Field {i} of the search: " + "what it narrows. " * 5}
        for i in range(20)
    },
    "required": ["field_00"],
}
DESCRIPTION = "Search the catalogue by any of its fields; " + "returns the matching entries, best first. " * 4
PER_RUN_BYTES = 1600
"""The history a run of this 2.5 KB tool costs beyond its iterations (``per_run_bytes``): 1,554 bytes here. With its
definition by value, the lookup's answer and the first model call's input would each carry its 2.5 KB again."""


@pytest.fixture
def task_queue() -> str:
    return queue_as_long_as_the_default("const-")


def _search(**_fields: str) -> str:
    return RESULT


search = beta_tool(_search, name="search", description=DESCRIPTION, input_schema=SCHEMA)


def _described(history: WorkflowHistory) -> dict[str, Any]:
    """The ``describe_tools`` local activity's answer, as its marker holds it."""
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            details = event.marker_recorded_event_attributes.details
            if "result" in details:
                answer: dict[str, Any] = json.loads(details["result"].payloads[0].data)
                return answer
    raise AssertionError("no describe_tools marker")


async def test_a_2_kb_tool_schema_costs_the_history_its_placeholder_and_claude_receives_it_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    assert len(canonical(SCHEMA)) > 2000 and len(canonical(DESCRIPTION)) > DESCRIBED_TOOL_FIELD_LIMIT
    fake_api.script(
        *[Reply([tool_use(f"toolu_{n}", "search", {"field_00": str(n)})], "tool_use") for n in range(CALLS - 1)],
        end_turn("Found."),
    )
    async with worker(search):
        run = await runner.start(**BASE, messages=[{"role": "user", "content": "Find."}], tools=[search], thread=False)
        result = await run.result()
        history = await run.handle.fetch_history()
    assert (result.status, result.iterations) == ("completed", CALLS)

    # Claude receives the definition exactly, in every request, and the tool results whole.
    bodies = fake_api.bodies()
    assert [body["tools"] for body in bodies] == [[search.to_dict()]] * CALLS
    assert bodies[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": RESULT}],
    }

    # The history holds placeholders (short references) where the description and schema were.
    slim = {
        "name": "search",
        "description": stored(ref_for(canonical(DESCRIPTION), short=True)),
        "input_schema": stored(ref_for(canonical(SCHEMA), short=True)),
    }
    # The tool's spec: its fields at their defaults left out (a registered tool's timeout is 5 minutes).
    assert _described(history)["tools"] == [
        {"name": "search", "definition": slim, "options": {"start_to_close_timeout": "PT5M"}}
    ]
    inputs, _ = payloads(history, CREATE_MESSAGE_ACTIVITY)
    assert inputs[0]["turn"]["settings"] == {"params": BASE, "tools": [slim]}
    # Each later turn sends its stored result as a pair, and nothing else of the message.
    held_result = ref_for(canonical(RESULT), short=True)
    assert [i["turn"].get("results") for i in inputs[1:]] == [[[f"toolu_{n}", held_result]] for n in range(CALLS - 1)]
    assert [i["turn"].get("pending") for i in inputs[1:]] == [None] * (CALLS - 1)
    assert markers(history) == [COMPACT_RESULTS_PATCH]

    assert per_run_bytes(list(history.events)) <= PER_RUN_BYTES


STORED_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": stored("~ref1")}


@pytest.mark.parametrize(
    ("message", "entries"),
    [
        ({"role": "user", "content": [STORED_RESULT]}, [["toolu_1", "~ref1"]]),
        (
            {
                "role": "user",
                "content": [
                    STORED_RESULT,
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "pong"},
                    {"type": "tool_result", "tool_use_id": "toolu_3", "content": [text("no")], "is_error": True},
                    {"type": "tool_result", "tool_use_id": "toolu_4", "content": stored("~ref4"), "is_error": True},
                ],
            },
            [
                ["toolu_1", "~ref1"],
                ["toolu_2", 0, "pong"],
                ["toolu_3", 1, [text("no")]],
                ["toolu_4", 1, stored("~ref4")],
            ],
        ),
        # Sent as they are: a block with another key, an explicit `is_error: false`, another block, a text message.
        ({"role": "user", "content": [{**STORED_RESULT, "cache_control": {"type": "ephemeral"}}]}, []),
        ({"role": "user", "content": [{**STORED_RESULT, "is_error": False}]}, []),
        ({"role": "user", "content": [STORED_RESULT, text("And now?")]}, []),
        ({"role": "user", "content": "Go on."}, []),
    ],
)
def test_a_turns_tool_results_go_compact_and_come_back_exactly(
    message: dict[str, Any], entries: list[list[Any]]
) -> None:
    earlier = {"role": "user", "content": "Earlier."}
    pending, compact = compact_results([earlier, message])
    assert compact == entries
    assert pending == ([earlier] if entries else [earlier, message])
    assert whole_pending({"pending": pending, "results": compact}) == [earlier, message]
    turn = ModelTurn(settings_ref="~s", pending=[earlier, message])
    assert whole_turn(compact_turn(turn)) == turn
