"""The `agent-runner` command line: exact rendered lines, every command against real servers, and the demo."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from temporalio.client import WorkflowQueryFailedError
from temporalio.testing import WorkflowEnvironment

from agent_runner import cli
from agent_runner.cli import (
    EDIT_ACCEPTED,
    NO_KEY_NOTICE,
    build_parser,
    build_run_input,
    client_tool_use_ids,
    list_query,
    parse_param,
    render_approvals,
    render_edit_outcome,
    render_pending_approval,
    render_reply,
    render_status,
    render_step_pause,
    render_summary,
    render_tool_result,
    render_transcript,
    render_wait_for_people,
    runs,
    tool_results_by_id,
    waiting_notices,
)
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import InvalidRunInput
from agent_runner.contract.types import RunResult, RunStatus, Usage
from agent_runner.dev import ScriptedClaude
from agent_runner.example_tools import get_time as example_get_time
from agent_runner.example_tools import get_weather as example_get_weather
from agent_runner.temporal_server import free_port
from agent_runner.testing import FakeMessagesAPI, Reply, bad_request, end_turn, text, thinking, tool_use
from tests.conftest import IMPORTS_ANTHROPIC, WorkerFactory
from tests.steering_support import CALLS, GATE, BrokenWorkers, delete_file, gated, wait_status
from tests.tools_for_tests import fail_disk, get_time, get_weather

REPO = Path(__file__).resolve().parents[1]

REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-fake-1",
    "content": [
        thinking("The user wants weather.\nTwo cities."),
        text("Let me check."),
        tool_use("toolu_1", "get_weather", {"city": "Paris"}),
        tool_use("toolu_2", "get_weather", {"city": "Atlantis"}),
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
RESULTS = {
    "toolu_1": {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21C in Paris"},
    "toolu_2": {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Unknown city", "is_error": True},
}


# ------------------------------------------------------------------------------------------ renderers


def test_render_reply_prints_header_blocks_then_tool_results() -> None:
    assert render_reply(REPLY, RESULTS, iteration=2) == [
        "── turn 2 · stop_reason tool_use ──",
        "┆ The user wants weather.",
        "┆ Two cities.",
        "Let me check.",
        '→ get_weather {"city": "Paris"}',
        '→ get_weather {"city": "Atlantis"}',
        "← get_weather: sunny, 21C in Paris",
        "← ✗ get_weather: Unknown city",
    ]


def test_render_reply_without_iteration_or_results_has_only_the_blocks() -> None:
    assert render_reply({"content": [text("Hi.\n\nBye.")], "stop_reason": "end_turn"}) == ["Hi.", "", "Bye."]


def test_render_reply_in_color_dims_thinking_and_reddens_errors() -> None:
    lines = render_reply(REPLY, RESULTS, iteration=1, color=True)
    assert lines[0] == "\x1b[1m── turn 1 · stop_reason tool_use ──\x1b[0m"
    assert lines[1] == "\x1b[2m┆ The user wants weather.\x1b[0m"
    assert lines[-1] == "\x1b[31m← ✗ get_weather: Unknown city\x1b[0m"


def test_render_reply_names_other_blocks_and_skips_missing_results() -> None:
    message = {
        "content": [
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "paris"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "tool_use", "id": "toolu_9", "name": "get_time", "input": {}},
            {"type": "container_upload", "file_id": "f"},
        ],
        "stop_reason": None,
    }
    assert render_reply(message, {}, iteration=1) == [
        "── turn 1 · stop_reason none ──",
        "┆ [redacted thinking]",
        '→ web_search {"query": "paris"} (server tool)',
        "← [web_search_tool_result]",
        "→ get_time {}",
        "[container_upload]",
    ]


def test_render_tool_result_flattens_blocks_indents_lines_and_clips() -> None:
    blocks = {"content": [{"type": "text", "text": "chart\nof sales"}, {"type": "image", "source": {}}]}
    assert render_tool_result("plot", blocks) == ["← plot: chart", "    of sales", "    [image]"]
    assert render_tool_result("noop", {"content": None}) == ["← noop: (no content)"]
    assert render_tool_result("big", {"content": "x" * 450}) == [f"← big: {'x' * 400}… (+50 characters)"]
    many = render_tool_result("ls", {"content": "\n".join(str(i) for i in range(12))})
    assert many == ["← ls: 0", *(f"    {i}" for i in range(1, 8)), "    … (+4 lines)"]


def test_tool_ids_and_results_come_from_the_reply_and_the_transcript() -> None:
    assert client_tool_use_ids(REPLY) == ["toolu_1", "toolu_2"]
    assert client_tool_use_ids({**REPLY, "stop_reason": "end_turn"}) == []
    transcript = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": REPLY["content"]},
        {"role": "user", "content": list(RESULTS.values())},
    ]
    assert tool_results_by_id(transcript) == RESULTS


def test_render_transcript_shows_roles_and_tool_results_under_their_turn() -> None:
    transcript = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [text("Let me check."), tool_use("toolu_1", "get_weather", {"city": "Paris"})],
        },
        {"role": "user", "content": [RESULTS["toolu_1"]]},
        {"role": "assistant", "content": [text("Sunny.")]},
        {"role": "user", "content": [text("Thanks!"), {"type": "image", "source": {}}]},
    ]
    assert render_transcript(transcript) == [
        "── user ──",
        "Weather in Paris?",
        "── assistant ──",
        "Let me check.",
        '→ get_weather {"city": "Paris"}',
        "← get_weather: sunny, 21C in Paris",
        "── assistant ──",
        "Sunny.",
        "── user ──",
        "Thanks!",
        "[image]",
    ]


def test_render_summary_has_status_turns_stop_reason_and_usage() -> None:
    result = RunResult(
        status="completed",
        iterations=2,
        stop_reason="end_turn",
        final_message=None,
        usage=Usage(input_tokens=20, output_tokens=10),
    )
    assert render_summary(result) == "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──"
    status = RunStatus(
        status="max_iterations",
        iterations=1,
        stop_reason=None,
        usage=Usage(input_tokens=5, output_tokens=1, cache_creation_input_tokens=3, cache_read_input_tokens=4),
    )
    assert render_summary(status) == (
        "── max_iterations · 1 turn · stop_reason none · 5 input / 1 output tokens (cache: 3 written, 4 read) ──"
    )


APPROVAL = {
    "tool_use_id": "toolu_D",
    "name": "delete_file",
    "input": {"path": "/etc"},
    "iteration": 2,
    "requested_at": "2026-05-04T10:15:00.123456+00:00",
}


def test_follow_notices_name_the_command_that_answers_them() -> None:
    assert render_pending_approval("run-1", APPROVAL) == (
        '⏸ waiting for approval: delete_file {"path": "/etc"} (toolu_D) — agent-runner approve run-1 toolu_D'
    )
    assert render_step_pause("my run", 3) == "⏸ paused after turn 3 — agent-runner advance 'my run'"
    assert render_step_pause("r", 1, color=True) == "\x1b[33m⏸ paused after turn 1 — agent-runner advance r\x1b[0m"
    huge = render_pending_approval("r", {**APPROVAL, "input": {"text": "x" * 500}})
    assert "… (+" in huge and huge.endswith("characters) (toolu_D) — agent-runner approve r toolu_D")


def test_waiting_notices_come_only_after_their_turn_was_printed() -> None:
    waiting = RunStatus(status="waiting_for_approval", iterations=2, pending_approvals=[APPROVAL])
    assert waiting_notices("r", waiting, turns_shown=1) == []
    assert waiting_notices("r", waiting, turns_shown=2) == [
        ("approval toolu_D", render_pending_approval("r", APPROVAL))
    ]
    paused = RunStatus(status="waiting_for_step", iterations=2)
    assert waiting_notices("r", paused, turns_shown=1) == []
    assert waiting_notices("r", paused, turns_shown=2) == [("step 2", "⏸ paused after turn 2 — agent-runner advance r")]
    assert waiting_notices("r", RunStatus(status="running", iterations=2), turns_shown=2) == []


def test_render_approvals_is_a_table_with_clipped_input() -> None:
    long = {**APPROVAL, "tool_use_id": "toolu_E", "input": {"text": "x" * 100}, "iteration": 3}
    etc = '{"path": "/etc"}'
    clipped = '{"text": "' + "x" * 49 + "…"
    assert len(clipped) == 60
    assert render_approvals([APPROVAL, long], tz=UTC) == [
        f"TOOL_USE_ID  TOOL         {'INPUT':<60}  TURN  WAITING SINCE",
        f"toolu_D      delete_file  {etc:<60}  2     2026-05-04 10:15:00",
        f"toolu_E      delete_file  {clipped}  3     2026-05-04 10:15:00",
    ]


def test_render_status_shows_the_version_waiting_approvals_and_why_it_stopped() -> None:
    status = RunStatus(
        status="stopped", iterations=1, version=3, pending_approvals=[APPROVAL], stop_reason_detail="closed the tab"
    )
    assert render_status("r", status)[-3:] == [
        "version      3",
        "approvals    1 waiting (agent-runner approvals r)",
        "stopped      closed the tab",
    ]
    assert render_status("r", RunStatus(status="running", iterations=0))[-1] == "version      0"


def test_edit_outcomes_and_params() -> None:
    assert render_edit_outcome(4) == "applied at version 4"
    assert render_edit_outcome(None) == EDIT_ACCEPTED == "accepted; it applies before the next turn"
    assert parse_param("max_tokens=2048") == ("max_tokens", 2048)
    assert parse_param('tool_choice={"type": "auto"}') == ("tool_choice", {"type": "auto"})
    assert parse_param("system=Be brief.") == ("system", "Be brief.")
    assert parse_param("system=a=b") == ("system", "a=b")
    assert parse_param('system="42"') == ("system", "42")
    assert parse_param('stop_sequences=["END"]') == ("stop_sequences", ["END"])
    assert parse_param("metadata=null") == ("metadata", None)
    for bad in ("max_tokens", "=3"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=JSON_VALUE"):
            parse_param(bad)


@pytest.mark.parametrize(
    ("status", "line"),
    [
        pytest.param(
            RunStatus(status="waiting_for_approval", iterations=2, pending_approvals=[APPROVAL]),
            "run r waits for approval of delete_file (toolu_D): the edit applies once it is decided "
            "(`agent-runner approve r toolu_D`, or `deny`).",
            id="one-approval",
        ),
        pytest.param(
            RunStatus(
                status="waiting_for_approval",
                iterations=2,
                pending_approvals=[APPROVAL, {**APPROVAL, "tool_use_id": "E"}],
            ),
            "run r waits for approval of 2 tool calls: the edit applies once they are decided "
            "(`agent-runner approvals r` lists them).",
            id="approvals",
        ),
        pytest.param(
            RunStatus(status="waiting_for_step", iterations=3),
            "run r is paused after turn 3: the edit applies when it is advanced (`agent-runner advance r`).",
            id="step",
        ),
        pytest.param(
            RunStatus(status="waiting_for_review", iterations=3),
            "run r waits for review of turn 3's tool results: the edit applies when it is advanced "
            "(`agent-runner advance r`).",
            id="review",
        ),
        pytest.param(
            RunStatus(status="sleeping", iterations=3, sleeping_until="2026-12-24T09:00:00+00:00"),
            "run r sleeps until 2026-12-24T09:00:00+00:00: the edit applies once it wakes (`agent-runner wake r`).",
            id="sleeping",
        ),
        pytest.param(
            RunStatus(status="running", iterations=3),
            "run r goes on (running): the edit applies before its next turn.",
            id="went-on",
        ),
    ],
)
def test_an_edit_that_waits_for_a_person_says_what_for_and_how_to_answer(status: RunStatus, line: str) -> None:
    assert render_wait_for_people("r", status) == line


async def test_steering_usage_errors_exit_2_and_bad_files_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    usage_errors = {
        ("inject", "r"): "agent-runner inject: error: give either TEXT or --file BLOCKS.json",
        ("inject", "r", "hi", "--file", "b.json"): "agent-runner inject: error: give either TEXT or --file BLOCKS.json",
        ("inject", "r", "hi", "--wait", "--no-wait"): "argument --no-wait: not allowed with argument --wait",
        ("params", "r", "max_tokens"): "expected KEY=JSON_VALUE, e.g. max_tokens=2048, got 'max_tokens'",
        ("params", "r", "top_k=1", "top_k=2"): "agent-runner params: error: top_k given more than once",
        ("approve", "r", "toolu_1", "--input", "[1]"): "expected a JSON object such as",
        ("replace-history", "r", "--file", "m.json"): "the following arguments are required: --expected-version",
        ("retry", "r", "--expected-version", "-1"): "expected a transcript version (0 or more), got '-1'",
        ("add-tools", "r", "{oops"): "expected a JSON object, got '{oops'",
    }
    for argv, message in usage_errors.items():
        assert await cli.amain(list(argv)) == 2, argv
        assert message in capsys.readouterr().err, argv
    blocks = tmp_path / "blocks.json"
    blocks.write_text('{"type": "text", "text": "hi"}')
    assert await cli.amain(["inject", "r", "--file", str(blocks)]) == 1
    assert capsys.readouterr().err == (
        f"error: The content blocks {blocks} must be a JSON list of objects, such as "
        '[{"type": "text", "text": "Answer in French."}].\n'
    )
    assert await cli.amain(["advance", "r", "--tool-results", str(tmp_path / "missing.json")]) == 1
    assert capsys.readouterr().err == (
        f"error: Cannot read the tool results {tmp_path / 'missing.json'}: No such file or directory.\n"
    )


def test_list_query_joins_its_filters() -> None:
    assert list_query(None, None, None) is None
    assert list_query("cancelled", "q'1", "StartTime > '2026-01-01'") == (
        "ExecutionStatus = 'Canceled' AND TaskQueue = 'q\\'1' AND (StartTime > '2026-01-01')"
    )


# ------------------------------------------------------------------------------------------ arguments


def test_run_input_from_a_prompt_has_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_RUNNER_MODEL", raising=False)
    args = build_parser().parse_args(["run", "Hi"])
    assert build_run_input(args) == {
        "model": "claude-sonnet-5-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    monkeypatch.setenv("AGENT_RUNNER_MODEL", "claude-from-env")
    assert build_run_input(args)["model"] == "claude-from-env"


def test_run_input_from_a_file_with_flags_on_top(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "model": "claude-file",
                "max_tokens": 77,
                "system": "Be terse.",
                "messages": [{"role": "user", "content": "Hi"}],
                "tools": ["get_time", {"type": "web_search_20250305", "name": "web_search"}],
                "temperature": 0.5,
            }
        )
    )
    args = build_parser().parse_args(
        ["run", "--file", str(path), "--model", "claude-flag", "--tools", "get_weather", "--max-iterations", "3"]
    )
    assert build_run_input(args) == {
        "model": "claude-flag",
        "max_tokens": 77,
        "system": "Be terse.",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": ["get_weather"],
        "temperature": 0.5,
        "max_iterations": 3,
    }


def test_invalid_run_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"messages": [], "temperture": 1}))
    with pytest.raises(InvalidRunInput) as e:
        build_run_input(build_parser().parse_args(["run", "--file", str(path)]))
    assert "Unknown field `temperture`" in str(e.value) and "`messages` must be a non-empty list" in str(e.value)


async def test_usage_errors_exit_2_and_input_errors_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert await cli.amain(["run"]) == 2
    assert "give either a PROMPT or --file" in capsys.readouterr().err
    assert await cli.amain(["follow", "x", "--from-iteration", "0"]) == 2
    assert "expected a positive integer, got '0'" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1]")
    assert await cli.amain(["run", "--file", str(tmp_path / "bad.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: The run input") and "must be a JSON object" in err and "Traceback" not in err


async def test_a_query_the_worker_cannot_answer_is_an_error_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def failing(_args: Any) -> int:
        raise WorkflowQueryFailedError("cannot import name 'x' from 'agent_runner.workflows.run_input'")

    monkeypatch.setattr(runs, "cmd_status", failing)
    assert await cli.amain(["status", "some-run"]) == 1
    assert capsys.readouterr().err == (
        "error: the run's worker could not answer a query: "
        "cannot import name 'x' from 'agent_runner.workflows.run_input'\n"
    )


# ------------------------------------------------------------------------------------------ example tools


def test_example_tools_answer_from_fixed_data_and_explain_unknown_cities() -> None:
    assert example_get_weather.call({"city": "paris"}) == "sunny, 21C in Paris"
    assert example_get_weather.call({"city": "Tokyo", "unit": "f"}) == "light rain, 64F in Tokyo"
    assert example_get_time.call({"city": " new  york "}) == "08:05 in New York"
    with pytest.raises(ToolError) as e:
        example_get_time.call({"city": "Atlantis"})
    assert "Unknown city 'Atlantis'" in str(e.value.content) and "Paris" in str(e.value.content)
    with pytest.raises(ToolError):
        example_get_weather.call({"city": "Paris", "unit": "k"})
    definition = example_get_weather.to_dict()
    assert definition["description"] == "Get the current weather for a city."
    assert definition["input_schema"]["properties"]["city"]["description"] == "The city name in English, e.g. Paris."


# ------------------------------------------------------------------------------------------ end to end


def _lines(out: str) -> list[str]:
    return out.splitlines()


USER = {"role": "user", "content": "Weather in Paris?"}


def _weather_reply() -> Reply:
    return Reply(
        content=[
            text("Let me check."),
            tool_use("toolu_W", "get_weather", {"city": "Paris"}),
            tool_use("toolu_F", "fail_disk", {"path": "/data"}),
        ],
        stop_reason="tool_use",
    )


@pytest.mark.usefixtures("temporal_address")
async def test_run_starts_and_follows_with_tool_results(
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(_weather_reply(), end_turn("Sunny, 21C."))
    run_id = f"cli-{uuid.uuid4()}"
    argv = ["run", "Weather in Paris?", "--tools", "get_weather", "fail_disk", "--model", "claude-fake-1"]
    async with worker(get_weather, fail_disk):
        code = await cli.amain([*argv, "--task-queue", task_queue, "--id", run_id])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert _lines(captured.out) == [
        run_id,
        "── turn 1 ──",
        "Let me check.",
        '→ get_weather {"city": "Paris"}',
        '→ fail_disk {"path": "/data"}',
        "← get_weather: sunny, 21C in Paris",
        "← ✗ fail_disk: ValueError('boom: disk full at /data')",
        "── turn 2 ──",
        "Sunny, 21C.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]
    first = fake_api.bodies()[0]
    assert first["model"] == "claude-fake-1" and first["max_tokens"] == 1024 and first["messages"] == [USER]
    assert [t["name"] for t in first["tools"]] == ["get_weather", "fail_disk"]


@pytest.mark.usefixtures("temporal_address")
async def test_follow_transcript_status_and_list_of_a_finished_run(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(_weather_reply(), end_turn("Sunny, 21C."))
    async with worker(get_weather, fail_disk):
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_weather, fail_disk])
        await run.until_done()
        transcript = await run.transcript()

        assert await cli.amain(["follow", run.id, "--from-iteration", "2"]) == 0
        assert _lines(capsys.readouterr().out) == [
            "── turn 2 ──",
            "Sunny, 21C.",
            "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
        ]

        assert await cli.amain(["transcript", run.id, "--json", "--task-queue", task_queue]) == 0
        assert json.loads(capsys.readouterr().out) == transcript

        assert await cli.amain(["transcript", run.id]) == 0
        assert _lines(capsys.readouterr().out) == [
            "── user ──",
            "Weather in Paris?",
            "── assistant ──",
            "Let me check.",
            '→ get_weather {"city": "Paris"}',
            '→ fail_disk {"path": "/data"}',
            "← get_weather: sunny, 21C in Paris",
            "← ✗ fail_disk: ValueError('boom: disk full at /data')",
            "── assistant ──",
            "Sunny, 21C.",
        ]

        assert await cli.amain(["status", run.id, "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert {k: status[k] for k in ("status", "iterations", "stop_reason", "usage", "transcript_length")} == {
            "status": "completed",
            "iterations": 2,
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 20,
                "output_tokens": 10,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "transcript_length": 4,
        }
        assert await cli.amain(["status", run.id]) == 0
        assert _lines(capsys.readouterr().out)[:3] == [
            f"run          {run.id}",
            "status       completed",
            "turns        2",
        ]

    # Visibility is eventually consistent: the run shows up in the list within moments.
    out = ""
    async with asyncio.timeout(10):
        while run.id not in out:
            assert await cli.amain(["list", "--task-queue", task_queue, "--status", "completed"]) == 0
            out = capsys.readouterr().out
            await asyncio.sleep(0.1)
    header, row = _lines(out)
    assert header.split() == ["ID", "STATUS", "STARTED"]
    assert row.split()[:2] == [run.id, "completed"]


@pytest.mark.usefixtures("temporal_address")
async def test_run_from_a_file_detached_with_overrides(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"model": "claude-file", "max_tokens": 9, "system": "Be terse.", "messages": [USER]}))
    fake_api.script(end_turn("ok"))
    argv = ["run", "--file", str(path), "--max-tokens", "99", "--no-thread", "--detach", "--system", "Be kind."]
    async with worker():
        assert await cli.amain([*argv, "--task-queue", task_queue]) == 0
        run_id = capsys.readouterr().out.strip()
        assert run_id.startswith("agent-")
        await runner.attach(run_id).until_done()
    assert fake_api.bodies() == [
        {
            "model": "claude-file",
            "max_tokens": 99,
            "system": "Be kind.",
            "messages": [USER],
            "tools": [],
            "stream": True,
        }
    ]


@pytest.mark.usefixtures("temporal_address")
async def test_a_failed_run_prints_its_error_and_exits_1(
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(bad_request("max_tokens: 9999 > 8192, the maximum for this model"))
    async with worker():
        argv = ["run", "Hi", "--max-tokens", "9999", "--model", "claude-fake-1", "--task-queue", task_queue]
        code = await cli.amain(argv)
    captured = capsys.readouterr()
    assert code == 1
    assert len(_lines(captured.out)) == 1  # the run's id, and no reply
    assert captured.err.startswith("error: ") and "max_tokens: 9999 > 8192" in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.usefixtures("temporal_address")
async def test_unknown_run_is_an_error_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["follow", "no-such-run"], ["cancel", "no-such-run"]):
        assert await cli.amain(command) == 1
        assert capsys.readouterr().err == "error: No run with id 'no-such-run'. List runs with `agent-runner list`.\n"


@pytest.mark.usefixtures("temporal_address")
async def test_cancel_stops_a_waiting_run(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(Reply(content=[text("too late")], delay=30))
    async with worker(graceful_shutdown_timeout=timedelta(seconds=1)):
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER])
        await asyncio.to_thread(fake_api.wait_for_requests, 1)
        assert await cli.amain(["cancel", run.id]) == 0
        assert _lines(capsys.readouterr().out) == [
            f"Cancellation of run {run.id} requested.",
            f"Run {run.id} is cancelled: in-flight model calls and tools were stopped.",
        ]
        assert await cli.amain(["follow", run.id]) == 1
        assert capsys.readouterr().err == f"error: Run {run.id} was cancelled.\n"
        assert await cli.amain(["cancel", run.id]) == 0
        assert capsys.readouterr().out == f"Run {run.id} already ended (cancelled); there is nothing to cancel.\n"


def _subprocess_env(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    env["TEMPORAL_ADDRESS"] = address
    env.pop("AGENT_RUNNER_MODEL", None)
    return env


async def test_ctrl_c_stops_following_but_not_the_run(
    temporal_address: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "get_time", {"city": "Paris"})], stop_reason="tool_use"),
        Reply(content=[text("too late")], delay=30),
    )
    async with worker(get_time, graceful_shutdown_timeout=timedelta(seconds=1)):
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_time])
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent_runner.cli",
            "follow",
            run.id,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_subprocess_env(temporal_address),
            cwd=REPO,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        async with asyncio.timeout(30):
            while not lines or not lines[-1].startswith("←"):
                line = await proc.stdout.readline()
                assert line, f"follow exited early: {lines}"
                lines.append(line.decode().rstrip("\n"))
            proc.send_signal(signal.SIGINT)
            out, err = await proc.communicate()
        assert proc.returncode == 130, err.decode()
        assert lines == [
            "── turn 1 ──",
            '→ get_time {"city": "Paris"}',
            "← get_time: 14:05 in Paris",
        ]
        assert out == b""
        assert err.decode() == (
            f"interrupted: stopped following. Run {run.id} keeps going; follow it again with "
            f"`agent-runner follow {run.id}`, or stop it with `agent-runner cancel {run.id}`.\n"
        )
        assert (await run.status()).status == "running"
        await run.handle.cancel()


COMMAND_MODULES = """
import argparse, importlib, json, sys
from agent_runner import cli

def handlers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from handlers(sub)
    if "handler" in parser._defaults:
        yield parser._defaults["handler"]

found = set(handlers(cli.build_parser()))
seen = {}
for module, name in sorted(found, key=lambda h: h[0] == "demo"):  # demo last: it loads the fake
    getattr(importlib.import_module(f"agent_runner.cli.{module}"), name)
    seen[module] = "agent_runner.testing" in sys.modules
print(json.dumps(seen, sort_keys=True))
"""


def test_only_the_demo_and_dev_commands_load_the_fake_messages_api() -> None:
    # Each command's module is imported when it runs; only the ones that serve a fake may load agent_runner.testing
    # (dev imports it when its stack starts, through agent_runner.dev).
    done = subprocess.run(
        [sys.executable, "-c", COMMAND_MODULES], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {
        "demo": True,
        "dev_stack": False,
        "runs": False,
        "steering": False,
        "schedules": False,
        "store_gc": False,
    }


@pytest.mark.slow
async def test_the_commands_that_only_ask_temporal_do_not_import_anthropic(
    temporal_address: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    # Importing anthropic takes seconds (its types are pydantic models built at import), so a command that reads a
    # run must not: only the ones that check a run's input or parameters against the SDK's types (run, fork, params)
    # need it. The check is that anthropic is imported at all, while the command runs, not how long it takes.
    fake_api.script(_weather_reply(), end_turn("Sunny, 21C."))
    async with worker(get_weather, fail_disk):
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_weather, fail_disk])
        await run.until_done()
        commands = [
            ["status", run.id],
            ["transcript", run.id],
            ["transcript", run.id, "--json"],
            ["follow", run.id],
            ["list", "--status", "completed"],
            ["cancel", run.id],
            ["dev", "--stop"],
        ]
        env = {**_subprocess_env(temporal_address), "PYTHONPROFILEIMPORTTIME": "1", "AGENT_RUNNER_HOME": str(tmp_path)}
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent_runner.cli",
                *command,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=REPO,
            )
            for command in commands
        ]
        async with asyncio.timeout(60):
            done = [await proc.communicate() for proc in procs]
    for command, proc, (out, err) in zip(commands, procs, done, strict=True):
        assert proc.returncode == 0, (command, out.decode(), err.decode()[-2000:])
        imported = IMPORTS_ANTHROPIC.search(err.decode()) is not None
        assert not imported, f"agent-runner {' '.join(command)} imported anthropic"
    assert b"sunny, 21C in Paris" in done[1][0]
    assert done[5][0].decode().startswith(f"Run {run.id} already ended")
    assert done[6][0] == b"No dev stack is running.\n"
    # The same probe sees anthropic where a command does need it.
    checked = subprocess.run(
        [sys.executable, "-c", "from agent_runner.client import check_run_input; check_run_input({})"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert IMPORTS_ANTHROPIC.search(checked.stderr) is not None


def test_demo_runs_the_example_agent_on_the_fake_api(temporal_env: WorkflowEnvironment) -> None:
    address = temporal_env.client.service_client.config.target_host
    proc = subprocess.run(
        [sys.executable, "-m", "agent_runner.cli", "demo"],
        env=_subprocess_env(address),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc.stdout)
    assert lines[0] == NO_KEY_NOTICE
    assert lines[1].startswith("Run agent-") and f"Temporal {address}" in lines[1]
    body: list[Any] = lines[2:]
    assert body == [
        "── user ──",
        "What's the weather and the local time in Paris and Tokyo right now?",
        "── turn 1 ──",
        "I'll check the weather in both cities first.",
        '→ get_weather {"city": "Paris"}',
        '→ get_weather {"city": "Tokyo"}',
        "← get_weather: sunny, 21C in Paris",
        "← get_weather: light rain, 18C in Tokyo",
        "── turn 2 ──",
        "Now the local time in each city.",
        '→ get_time {"city": "Paris"}',
        '→ get_time {"city": "Tokyo"}',
        "← get_time: 14:05 in Paris",
        "← get_time: 21:05 in Tokyo",
        "── turn 3 ──",
        "Here's the picture right now:",
        "- Paris: sunny, 21C, local time 14:05.",
        "- Tokyo: light rain, 18C, local time 21:05.",
        "── completed · 3 turns · stop_reason end_turn · 1500 input / 230 output tokens ──",
    ]


@pytest.mark.usefixtures("temporal_address")
async def test_fork_and_terminate_from_the_command_line(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "get_weather", {"city": "Paris"})], stop_reason="tool_use"),
        end_turn("Sunny."),
        end_turn("Sunny again."),
        Reply(content=[text("slow")], delay=30),
    )
    async with worker(get_weather, graceful_shutdown_timeout=timedelta(seconds=1)):
        run = await runner.start(
            model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_weather], thread=False
        )
        await run.until_done()
        capsys.readouterr()
        assert await cli.amain(["fork", run.id, "--from-iteration", "2", "--id", f"{run.id}-fork", "--detach"]) == 0
        assert capsys.readouterr().out == f"{run.id}-fork\n"
        fork = runner.attach(f"{run.id}-fork")
        assert (await fork.until_done()).content[0].text == "Sunny again."  # type: ignore[union-attr]
        slow = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER])
        await asyncio.to_thread(fake_api.wait_for_requests, 4)
        assert await cli.amain(["terminate", slow.id, "--reason", "runaway"]) == 0
        assert capsys.readouterr().out == f"Run {slow.id} is terminated: runaway\n"
    assert fake_api.bodies()[2] == fake_api.bodies()[1]


# ------------------------------------------------------------------------------------------ no silent hangs


def _no_worker(task_queue: str) -> str:
    return (
        f"No worker is polling task queue {task_queue!r}. Start one: python worker.py --tools "
        f"agent_runner.example_tools --task-queue {task_queue} (or, to try things out, the whole development stack: "
        f"agent-runner dev --detach --task-queue {task_queue})"
    )


@pytest.mark.usefixtures("temporal_address")
async def test_without_a_worker_run_says_so_and_waits_while_status_and_transcript_fail(
    worker: WorkerFactory, fake_api: FakeMessagesAPI, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` follows a run that a worker started later carries on; `status` and `transcript` cannot wait."""
    fake_api.script(end_turn("Sunny."))
    run_id = f"cli-{uuid.uuid4()}"
    out = err = ""
    running = asyncio.create_task(cli.amain(["run", "Hi", "--id", run_id, "--task-queue", task_queue]))
    try:
        async with asyncio.timeout(10):
            while "note:" not in err:
                await asyncio.sleep(0.05)
                captured = capsys.readouterr()
                out, err = out + captured.out, err + captured.err
        assert (out, err) == (f"{run_id}\n", f"note: waiting for a worker. {_no_worker(task_queue)}\n")
        for command in ("status", "transcript"):
            assert await cli.amain([command, run_id]) == 1
            assert capsys.readouterr() == ("", f"error: {_no_worker(task_queue)}\n")
        async with worker():
            assert await running == 0
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert _lines(capsys.readouterr().out) == [
        "── turn 1 ──",
        "Sunny.",
        "── completed · 1 turn · stop_reason end_turn · 10 input / 5 output tokens ──",
    ]
    assert await cli.amain(["run", "Hi again", "--id", run_id, "--task-queue", task_queue, "--detach"]) == 1
    assert capsys.readouterr() == (
        "",
        f"error: A run with id {run_id!r} already exists: pick another --id, or follow it with "
        f"`agent-runner follow {run_id}`.\n",
    )


@pytest.mark.slow  # about 15 s: Temporal retries a failing workflow task after 10 s
@pytest.mark.usefixtures("temporal_address")
async def test_follow_says_once_that_a_run_whose_workflow_task_keeps_failing_is_not_going_on_and_goes_on_once_fixed(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    workers = BrokenWorkers(fake_api, monkeypatch)
    out = err = ""
    async with worker():
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER])
        following = asyncio.create_task(cli.amain(["follow", run.id]))
        workers.break_()
        try:
            async with asyncio.timeout(30):
                while "note:" not in err:
                    await asyncio.sleep(0.05)
                    captured = capsys.readouterr()
                    out, err = out + captured.out, err + captured.err
            workers.fix()
            assert await asyncio.wait_for(following, 40) == 0
        finally:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
    captured = capsys.readouterr()
    out, err = out + captured.out, err + captured.err
    assert re.sub(r"\(attempt \d+;", "(attempt N;", err) == (
        f"note: Run {run.id} is not going on: its workflow task keeps failing on the workers (attempt N; "
        "WORKFLOW_WORKER_UNHANDLED_FAILURE: a bug in the worker's code). The workers' log says why (`temporal "
        f"workflow show --workflow-id {run.id}` shows the first failure); once workers run code that can go on with "
        "the run, it goes on by itself, and this wait with it.\n"
    )
    assert _lines(out) == [
        "── turn 1 ──",
        "Looking.",
        "── turn 2 ──",
        "Sunny.",
        "── completed · 2 turns · stop_reason end_turn · 20 input / 10 output tokens ──",
    ]


@pytest.mark.usefixtures("temporal_address")
async def test_status_of_a_terminated_run_says_terminated(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"))
    async with worker(delete_file):
        run = await runner.start(
            model="claude-fake-1", max_tokens=50, messages=[USER], tools=[delete_file], approval={"tools": "all"}
        )
        await wait_status(run, "waiting_for_approval")
        assert await cli.amain(["terminate", run.id, "--reason", "runaway"]) == 0
        capsys.readouterr()
        assert await cli.amain(["status", run.id]) == 0
    assert _lines(capsys.readouterr().out)[:4] == [
        f"run          {run.id}",
        "status       terminated",
        "turns        1",
        "stop_reason  tool_use",
    ]


@pytest.mark.usefixtures("temporal_address")
async def test_status_and_transcript_of_an_ended_run_need_no_worker(
    runner: AgentRunner, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """How a run ended is in its history: `status` reads it there when no worker polls the run's task queue."""
    run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER])
    await run.terminate("nobody serves this queue")
    async with asyncio.timeout(20):
        assert await cli.amain(["status", run.id, "--task-queue", task_queue]) == 0
    assert _lines(capsys.readouterr().out) == [
        f"run          {run.id}",
        "status       terminated",
        "turns        0",
        "stop_reason  none",
        "tokens       0 input / 0 output tokens",
        "messages     1",
        "version      unknown",
        "stopped      nobody serves this queue",
    ]
    # Its conversation too, as its history holds it (no model call: the input's message).
    assert await cli.amain(["transcript", run.id, "--json", "--task-queue", task_queue]) == 0
    assert capsys.readouterr() == (json.dumps([USER], indent=2) + "\n", "")
    # A run that has not ended still says that a worker is needed, and how to start one.
    open_run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER])
    try:
        assert await cli.amain(["status", open_run.id, "--task-queue", task_queue]) == 1
        assert capsys.readouterr() == ("", f"error: {_no_worker(task_queue)}\n")
    finally:
        await open_run.terminate("test over")


@pytest.mark.usefixtures("temporal_address")
async def test_status_and_transcript_of_a_run_cut_off_by_max_iterations_show_its_last_tool_results_without_a_worker(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The tool results after the last reply reached no model call: the run's result carries them, as the console's.

    The worker is gone but polled a moment ago, so a query would wait ~20 s for it: the commands see that the run
    has ended and read its history at once.
    """
    fake_api.script(Reply([text("Let me check."), tool_use("toolu_W", "get_weather", {"city": "Paris"})], "tool_use"))
    async with worker(get_weather):
        run = await runner.start(
            model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_weather], max_iterations=1
        )
        await run.result()
        own = await run.transcript()  # the run's own word, while a worker answers
    async with asyncio.timeout(5):  # a guard, not a benchmark: a query would wait ~20 s
        assert await cli.amain(["transcript", run.id, "--json", "--task-queue", task_queue]) == 0
    out, note = capsys.readouterr()
    assert (
        json.loads(out)
        == own
        == [
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_W", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_W", "content": "sunny, 21C in Paris"}],
            },
        ]
    )
    assert note == ""
    async with asyncio.timeout(5):
        assert await cli.amain(["status", run.id, "--task-queue", task_queue]) == 0
    assert _lines(capsys.readouterr().out)[:6] == [
        f"run          {run.id}",
        "status       max_iterations",
        "turns        1",
        "stop_reason  tool_use",
        "tokens       10 input / 5 output tokens",
        "messages     3",
    ]


@pytest.mark.usefixtures("temporal_address", "fresh_tools")
async def test_an_edit_to_a_run_waiting_for_a_person_says_what_it_waits_for(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.script(
        Reply([tool_use("toolu_D", "delete_file", {"path": "/etc"})], "tool_use"), end_turn("Done."), end_turn("Bye.")
    )
    async with worker(delete_file):
        run = await runner.start(
            model="claude-fake-1", max_tokens=50, messages=[USER], tools=[delete_file], approval={"tools": "all"}
        )
        await wait_status(run, "waiting_for_approval")
        assert await cli.amain(["inject", run.id, "In French."]) == 0
        assert capsys.readouterr() == (
            f"{EDIT_ACCEPTED}\n",
            f"note: run {run.id} waits for approval of delete_file (toolu_D): the edit applies once it is decided "
            f"(`agent-runner approve {run.id} toolu_D`, or `deny`).\n"
            f"note: if it cannot apply then, `agent-runner status {run.id}` says why.\n",
        )
        await run.approve("toolu_D")
        await run.until_done()
        stepped = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], step=True)
        await wait_status(stepped, "waiting_for_step", 1)
        assert await cli.amain(["inject", stepped.id, "More.", "--wait"]) == 0
        assert capsys.readouterr() == (
            f"{EDIT_ACCEPTED}\n",
            f"note: run {stepped.id} is paused after turn 1: the edit applies when it is advanced "
            f"(`agent-runner advance {stepped.id}`).\n"
            f"note: if it cannot apply then, `agent-runner status {stepped.id}` says why.\n",
        )
        await stepped.stop()
    assert fake_api.bodies()[1]["messages"][-1]["content"][-1] == {"type": "text", "text": "In French."}


@pytest.mark.usefixtures("fresh_tools")
async def test_interrupting_a_waiting_edit_says_it_is_still_queued(
    temporal_address: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_G", "gated", {"city": "Paris"})], "tool_use"), end_turn("ok"))
    async with worker(gated):
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], tools=[gated])
        async with asyncio.timeout(20):
            while not CALLS:
                await asyncio.sleep(0.02)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent_runner.cli", "inject", run.id, "In French.",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=_subprocess_env(temporal_address), cwd=REPO,
        )  # fmt: skip
        async with asyncio.timeout(20):  # the run accepted the edit: now it waits for the boundary
            while not any(
                e.HasField("workflow_execution_update_completed_event_attributes")
                for e in (await run.handle.fetch_history()).events
            ):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # the command is in its wait
            proc.send_signal(signal.SIGINT)
            out, err = await proc.communicate()
        GATE.set()
        await run.until_done()
    assert (proc.returncode, out.decode()) == (130, "")
    assert err.decode() == (
        f"interrupted: stopped waiting. The edit is still queued in run {run.id} and applies before its next turn; "
        f"`agent-runner status {run.id}` shows the transcript version.\n"
    )
    assert fake_api.bodies()[1]["messages"][-1]["content"][-1] == {"type": "text", "text": "In French."}


# ------------------------------------------------------------------------------------------ one-line errors


@pytest.mark.parametrize(
    ("address", "error"),
    [
        pytest.param(
            "127.0.0.1:1",
            "Cannot reach Temporal at '127.0.0.1:1' (from TEMPORAL_ADDRESS): Connection refused. Start the server "
            "there, or point TEMPORAL_ADDRESS at a running one (unset, the embedded local server is used).",
            id="unreachable",
        ),
        pytest.param(
            "localhost:notaport",
            "The Temporal address 'localhost:notaport' (from TEMPORAL_ADDRESS) is malformed (invalid port number): "
            "give HOST:PORT, e.g. 127.0.0.1:7233.",
            id="bad-port",
        ),
        pytest.param(
            "http://localhost:7233",
            "The Temporal address 'http://localhost:7233' (from TEMPORAL_ADDRESS) must be HOST:PORT without a "
            "scheme, e.g. 127.0.0.1:7233.",
            id="scheme",
        ),
    ],
)
async def test_a_bad_temporal_address_is_one_line(
    address: str, error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    assert await cli.amain(["status", "some-run"]) == 1
    assert capsys.readouterr() == ("", f"error: {error}\n")


def _no_namespace(address: str, namespace: str) -> str:
    return (
        f"Temporal at {address} has no namespace {namespace!r}: set TEMPORAL_NAMESPACE to the namespace the workers "
        "use (`temporal operator namespace list` lists them)."
    )


@pytest.mark.parametrize(
    "command",
    [
        ["status", "some-run"],
        ["transcript", "some-run"],
        ["inject", "some-run", "hi"],
        ["list"],
        ["run", "Hi", "--detach"],
    ],
    ids=lambda command: command[0],
)
@pytest.mark.parametrize("namespace", ["no-such-namespace", ""], ids=["unknown", "empty"])
async def test_a_namespace_temporal_does_not_have_is_one_line_naming_it_not_a_missing_run(
    command: list[str],
    namespace: str,
    temporal_address: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Temporal answers NOT_FOUND for a run in a namespace it does not have, as for a run it does not have: the
    namespace is checked as the client connects, so no command says that a run is missing, or quotes Temporal."""
    monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)
    assert await cli.amain(command) == 1
    assert capsys.readouterr() == ("", f"error: {_no_namespace(temporal_address, namespace)}\n")


def test_the_worker_refuses_a_namespace_temporal_does_not_have_in_one_line(
    temporal_address: str, tmp_path: Path
) -> None:
    env = {**_subprocess_env(temporal_address), "TEMPORAL_NAMESPACE": "no-such-namespace"}
    assert _worker_refusal(env, tmp_path) == _no_namespace(temporal_address, "no-such-namespace")


def _worker_refusal(env: dict[str, str], cwd: Path, *args: str) -> str:
    """The one line a worker started with ``env`` and ``args`` logs as it refuses to start (exit code 2)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "worker.py"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    prefix = " ERROR agent_runner.worker: error: "
    assert prefix in line
    return line.split(prefix, 1)[1]


@pytest.mark.usefixtures("temporal_address")
async def test_a_store_that_cannot_be_opened_is_one_line(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.script(_weather_reply(), end_turn("Sunny."))
    async with worker(get_weather, fail_disk):
        # Two turns: the second request names the first's messages in the store, which the transcript reads.
        run = await runner.start(model="claude-fake-1", max_tokens=50, messages=[USER], tools=[get_weather, fail_disk])
        await run.until_done()
        monkeypatch.setenv("AGENT_RUNNER_STORE", "sqlite:////nonexistent/dir/store.db")
        assert await cli.amain(["transcript", run.id]) == 1
    assert capsys.readouterr() == (
        "",
        "error: cannot open the store at sqlite:////nonexistent/dir/store.db: unable to open database file. Check "
        "that the directory //nonexistent/dir exists and is writable, or point AGENT_RUNNER_STORE elsewhere.\n",
    )


BROKEN_TOOLS = 'raise RuntimeError("API_TOKEN is not set")\n'


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "args", "error"),
    [
        pytest.param(
            {"TEMPORAL_ADDRESS": "localhost:notaport"},
            [],
            "The Temporal address 'localhost:notaport' (from TEMPORAL_ADDRESS) is malformed (invalid port number): "
            "give HOST:PORT, e.g. 127.0.0.1:7233.",
            id="bad-address",
        ),
        pytest.param(
            {},
            [],
            "Cannot reach Temporal at '127.0.0.1:1' (from TEMPORAL_ADDRESS): Connection refused. Start the server "
            "there, or point TEMPORAL_ADDRESS at a running one (unset, the embedded local server is used).",
            id="unreachable",
        ),
        pytest.param(
            {"AGENT_RUNNER_STORE": "postgresql://nobody@127.0.0.1:1/none"},
            [],
            "cannot set up the store at postgresql://nobody@127.0.0.1:1/none: connection failed: connection to server "
            'at "127.0.0.1", port 1 failed: Connection refused Is the server running on that host and accepting '
            "TCP/IP connections?. Check that the server is up, that the database exists and that the user may create "
            "tables in it, or point AGENT_RUNNER_STORE elsewhere.",
            id="store",
        ),
        pytest.param(
            {},
            ["--tools", "broken_tools"],
            "Tool module 'broken_tools' failed while it was imported: RuntimeError: API_TOKEN is not set. Fix the "
            "module, or leave it out of --tools and AGENT_RUNNER_TOOLS.",
            id="tool-module",
        ),
    ],
)
def test_the_worker_refuses_a_bad_configuration_in_one_line(
    env: dict[str, str], args: list[str], error: str, tmp_path: Path
) -> None:
    (tmp_path / "broken_tools.py").write_text(BROKEN_TOOLS)
    assert _worker_refusal({**_subprocess_env("127.0.0.1:1"), **env}, tmp_path, *args) == error


# ------------------------------------------------------------------------------------------ agent-runner dev


def _weather_request(*messages: dict[str, Any], tools: tuple[str, ...] = ("get_weather", "get_time")) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages), "tools": [{"name": n} for n in tools]}


class TestScriptedClaude:
    """The dev stack's model without a key answers any prompt, and every run it starts ends."""

    def test_it_calls_the_tools_a_prompt_asks_for_then_quotes_their_results(self) -> None:
        claude = ScriptedClaude()
        prompt = {"role": "user", "content": "What's the weather in tokyo and Paris?"}
        first = claude(_weather_request(prompt))
        assert (first.stop_reason, first.id) == ("tool_use", "msg_dev_0001")
        assert first.content == [
            text("Let me check the weather in Tokyo and Paris."),  # in the prompt's order, spelled as the tools do
            tool_use("toolu_dev_0001_1", "get_weather", {"city": "Tokyo"}),
            tool_use("toolu_dev_0001_2", "get_weather", {"city": "Paris"}),
        ]
        results = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_dev_0001_1", "content": "No.", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_dev_0001_2", "content": "sunny, 21C in Paris"},
                {"type": "text", "text": "In French, please."},
            ],
        }
        second = claude(_weather_request(prompt, {"role": "assistant", "content": first.content}, results))
        assert second.stop_reason == "end_turn"
        assert second.content == [
            text(
                "Here is what the tools say:\n- Weather in Tokyo: unavailable (No.)\n- Weather in Paris: sunny, 21C\n"
                'You also wrote "In French, please.": I am the scripted fake model of `agent-runner dev`, so I can '
                "only quote the tools."
            )
        ]

    def test_a_thread_continue_is_answered_from_the_whole_conversation(self) -> None:
        claude = ScriptedClaude()
        thread = {"type": "create"}
        first = claude({**_weather_request({"role": "user", "content": "Time in Berlin?"}), "thread": thread})
        assert first.content[1:] == [tool_use("toolu_dev_0001_1", "get_time", {"city": "Berlin"})]
        result = {"type": "tool_result", "tool_use_id": "toolu_dev_0001_1", "content": "14:05 in Berlin"}
        second = claude(
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [result]}],
                "thread": {"type": "continue", "previous_message_id": first.id},
            }
        )
        assert second.content == [text("Here is what the tools say:\n- Local time in Berlin: 14:05")]

    @pytest.mark.parametrize(
        ("request_body", "answer"),
        [
            pytest.param(
                _weather_request({"role": "user", "content": "Hello"}),
                "I am the scripted fake model of `agent-runner dev` (ANTHROPIC_API_KEY is not set), so I cannot "
                'really answer "Hello". Ask about the weather or the time in Berlin, London, New York, Paris, San '
                "Francisco, Sydney or Tokyo, or set ANTHROPIC_API_KEY to talk to Claude.",
                id="no-city",
            ),
            pytest.param(
                _weather_request({"role": "user", "content": "Weather in Paris?"}, tools=()),
                "I am the scripted fake model of `agent-runner dev` (ANTHROPIC_API_KEY is not set), so I cannot "
                'really answer "Weather in Paris?". Offer me the example tools (`--tools get_weather get_time`) and '
                "ask about the weather or the time, or set ANTHROPIC_API_KEY to talk to Claude.",
                id="no-tools",
            ),
            pytest.param(
                {
                    **_weather_request({"role": "user", "content": "Weather in Paris?"}),
                    "tool_choice": {"type": "none"},
                },
                "I am the scripted fake model of `agent-runner dev` (ANTHROPIC_API_KEY is not set), so I cannot "
                'really answer "Weather in Paris?". Offer me the example tools (`--tools get_weather get_time`) and '
                "ask about the weather or the time, or set ANTHROPIC_API_KEY to talk to Claude.",
                id="tool-choice-none",
            ),
        ],
    )
    def test_without_tools_or_cities_it_says_what_it_is(self, request_body: dict[str, Any], answer: str) -> None:
        reply = ScriptedClaude()(request_body)
        assert (reply.stop_reason, reply.content) == ("end_turn", [text(answer)])


def _dev_env(home: Path, **extra: str) -> dict[str, str]:
    """No key, no configured Temporal (not even a profile), the dev stack's files in ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(AGENT_RUNNER_HOME=str(home), TEMPORAL_CONFIG_FILE=str(home / "no-temporal.toml"), **extra)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_runner.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dev_detach_starts_the_embedded_server_and_stop_leaves_nothing(tmp_path: Path) -> None:
    """`dev --detach` returns once ready and is reused when run again; `--stop` ends it, its server included."""
    port = free_port()
    env = _dev_env(tmp_path)
    try:
        started = _cli(env, "dev", "--detach", "--port", str(port))
        assert started.returncode == 0, started.stdout + started.stderr
        state = json.loads((tmp_path / "dev.json").read_text())
        assert _lines(started.stdout) == [
            f"agent-runner dev is ready (pid {state['pid']})",
            f"  temporal    127.0.0.1:{port} (embedded, started by this stack; data in {tmp_path}/temporal.db)",
            "  task queue  agent-runner",
            "  tools       get_time, get_weather (from agent_runner.example_tools)",
            "  model       the scripted fake Messages API (ANTHROPIC_API_KEY is not set): it calls get_weather and "
            "get_time for the cities a prompt names, then quotes them",
            f"  store       {state['store']}",
            f"  try         TEMPORAL_ADDRESS=127.0.0.1:{port} agent-runner run \"What's the weather in Paris and "
            'Tokyo?" --tools get_weather',
            f"  stop        agent-runner dev --stop (log: {tmp_path}/dev.log)",
        ]
        assert _alive(state["pid"]) and _alive(state["server_pid"])

        again = _cli(env, "dev", "--detach", "--port", str(port))
        assert (again.returncode, again.stdout) == (0, started.stdout)
        assert again.stderr == f"note: a dev stack is already running (pid {state['pid']}); using it.\n"
        other = _cli(env, "dev", "--tools", "tests.tools_for_tests")
        assert (other.returncode, other.stdout) == (1, "")
        assert other.stderr == (
            f"error: A dev stack is already running (pid {state['pid']}, Temporal 127.0.0.1:{port}, task queue "
            "agent-runner, tools from agent_runner.example_tools): use it, or stop it first with `agent-runner dev "
            "--stop`.\n"
        )

        run = _cli({**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}, "run", "Time in Tokyo?", "--tools", "get_time")
        assert run.returncode == 0, run.stderr
        assert _lines(run.stdout)[-3:-1] == ["Here is what the tools say:", "- Local time in Tokyo: 21:05"]
    finally:
        stopped = _cli(env, "dev", "--stop")
    assert (stopped.returncode, stopped.stdout) == (0, f"Stopped the dev stack (pid {state['pid']}).\n")
    assert not _alive(state["pid"]) and not _alive(state["server_pid"])
    assert not (tmp_path / "dev.json").exists()
    assert _cli(env, "dev", "--stop").stdout == "No dev stack is running.\n"


@pytest.mark.slow
def test_a_dev_stack_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_tools.py").write_text(BROKEN_TOOLS)
    env = _dev_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1", PYTHONPATH=str(tmp_path))
    error = (
        "error: Tool module 'broken_tools' failed while it was imported: RuntimeError: API_TOKEN is not set. Fix the "
        "module, or leave it out of --tools and AGENT_RUNNER_TOOLS.\n"
    )
    detached = _cli(env, "dev", "--detach", "--tools", "broken_tools")
    assert (detached.returncode, detached.stdout, detached.stderr) == (1, "", error)
    unreachable = _cli(env, "dev")
    assert (unreachable.returncode, unreachable.stdout) == (1, "")
    assert unreachable.stderr == (
        "error: Cannot reach Temporal at '127.0.0.1:1' (from TEMPORAL_ADDRESS): Connection refused. Start the server "
        "there, or point TEMPORAL_ADDRESS at a running one (unset, the embedded local server is used).\n"
    )
    assert not (tmp_path / "dev.json").exists()


@pytest.mark.slow
async def test_dev_in_the_foreground_stops_on_ctrl_c(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    address = temporal_env.client.service_client.config.target_host
    queue = f"dev-{uuid.uuid4()}"
    env = _dev_env(tmp_path, TEMPORAL_ADDRESS=address)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_runner.cli", "dev", "--task-queue", queue,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(60):
        while not lines or not lines[-1].startswith("  stop"):
            line = await proc.stdout.readline()
            assert line, f"dev exited early: {lines}"
            lines.append(line.decode().rstrip("\n"))
        assert lines[1:3] == [f"  temporal    {address} (from TEMPORAL_ADDRESS)", f"  task queue  {queue}"]
        assert lines[-2:] == [
            f'  try         agent-runner run "What\'s the weather in Paris and Tokyo?" --tools get_weather '
            f"--task-queue {queue}",
            "  stop        Ctrl-C",
        ]
        runner = AgentRunner(temporal_env.client, task_queue=queue)
        run = await runner.start(
            model="m",
            max_tokens=50,
            messages=[{"role": "user", "content": "Weather in Sydney?"}],
            tools=["get_weather"],
        )
        assert (await run.until_done()).content[0].text == (  # type: ignore[union-attr]
            "Here is what the tools say:\n- Weather in Sydney: windy, 12C"
        )
        proc.send_signal(signal.SIGINT)
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    assert _lines(out.decode()) == [
        "stopping: the worker finishes what it is doing (runs carry on when a worker comes back)",
        "stopped",
    ]
    assert not (tmp_path / "dev.json").exists()
