"""The README's stock-`temporal` CLI commands work: the steering block verbatim, and the MCP and toolset runs' JSON.

The steering block runs verbatim against `agent-runner dev --detach` and approves a real waiting call.

The block is read from README.md itself (the one after the ``stock-cli`` comment) and run by bash with
``set -euo pipefail`` in the walk-through's shell (``.venv/bin/activate`` sourced, as the walk-through's first line
does), without ``ANTHROPIC_API_KEY``: the dev stack's scripted fake asks for ``get_weather`` in Paris, and its
tool_use ids are numbered from the stack's start, so the call the block approves is ``toolu_dev_0001_1``. Temporal
is a server of this test's own (``TEMPORAL_ADDRESS``, which the stock CLI reads too).

The ``temporal schedule`` block (after its ``stock-cli-schedule`` comment) runs command by command against the
session's test server, on the test's task queue and with a schedule id of the test's own: create, trigger, then
delete once the run it fired has finished.

The MCP and toolset examples (each after a ``stock-cli-json`` comment) need an MCP server and a toolset backend that
the dev stack's scripted model never calls, so their commands run with the session's test server, a worker of the
test's own (tests/mcp_server.py as ``files``, a recording browser) and the fake API scripted to call them: the JSON
they start is the README's, byte for byte (only the task queue is the test's). The registered agent's run is served by
a worker registering the README's own agents module (its ``# my_agents.py`` block, run).
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_runner.client import AgentRunner
from agent_runner.contract.errors import ScheduleNotFound
from agent_runner.schedules import describe_schedule
from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, end_turn, text, tool_use
from tests.conftest import WorkerFactory, stock_temporal
from tests.test_mcp import config
from tests.test_readme_walkthrough import READY, REPO, _env, readme_block, run_beside_a_dev_stack, temporal
from tests.test_toolsets import RecordingBrowser, action
from tests.test_toolsets import result as toolset_result
from tests.tools_for_tests import get_weather

__all__ = ["temporal"]  # the fixture, imported for this module's test

MARK = "<!-- stock-cli: tests/test_readme_stock_cli.py runs this block verbatim -->\n"

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00")

FINAL_TEXT = (
    'Here is what the tools say:\\n- Weather in Paris: sunny, 21C\\nYou also wrote \\"In French.\\": I am the '
    "scripted fake model of `agent-runner dev`, so I can only quote the tools."
)

OUTPUT = [
    # temporal workflow start ...
    "Running execution:",
    "  WorkflowId  my-run",
    "  RunId       UUID",
    "  Type        AgentRun",
    "  Namespace   default",
    "  TaskQueue   agent-runner",
    # temporal workflow query ... --name pending_approvals
    "Query result:",
    '  QueryResult  [{"input":{"city":"Paris"},"iteration":1,"name":"get_weather","note":null,'
    '"requested_at":"TIME","tool_use_id":"toolu_dev_0001_1"}]',
    # inject_message: queued (seq 1) while the run waits for approval, so the transcript is still at version 1
    "  Name      inject_message",
    "  UpdateID  UUID",
    "  Result    map[seq:1 version:1]",
    # approve_tool: a real waiting call
    "  Name      approve_tool",
    "  UpdateID  UUID",
    "  Result    map[version:1]",
    # temporal workflow result: the tool ran, and the injected message went out with its result
    "Results:",
    "  Status          COMPLETED",
    '  Result          {"detail":null,"final_message":{"content":[{"text":"' + FINAL_TEXT + '","type":"text"}],'
    '"id":"msg_dev_0002","model":"claude-sonnet-5-5","role":"assistant","stop_reason":"end_turn",'
    '"stop_sequence":null,"type":"message","usage":{"input_tokens":153,"output_tokens":56}},"iterations":2,'
    # The run's last status, its fields at their defaults left out (RunResult.last_status).
    '"last_status":{"iterations":2,"replies":2,"replies_head":"~TRFTHGS5ydpeXDlqkbLUIQ","status":"completed","stop_reason":"end_turn","transcript_length":4,"usage":{"input_tokens"'
    ':215,"output_tokens":101},"version":4},'
    '"status":"completed","stop_reason":"end_turn","usage":{"cache_creation_input_tokens":0,'
    '"cache_read_input_tokens":0,"input_tokens":215,"output_tokens":101}}',
    "  ResultEncoding  json/plain",
]


def stock_cli_block() -> str:
    """The README's shell block right after the stock-cli mark."""
    return readme_block(MARK)


def _normalized(out: str) -> list[str]:
    return [ISO_TIME.sub("TIME", UUID.sub("UUID", line)).rstrip() for line in out.splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_readme_stock_temporal_cli_block_runs_verbatim_and_approves_a_waiting_call(
    temporal: str, tmp_path: Path
) -> None:
    home = tmp_path / "agent-runner-home"
    env = _env(temporal, home)
    script = "set -euo pipefail\n. .venv/bin/activate\n" + stock_cli_block()
    done, left = run_beside_a_dev_stack(script, env, timeout=180)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = _normalized(done.stdout)
    ready = [re.fullmatch(pattern, line) for pattern, line in zip(READY, lines, strict=False)]
    assert all(ready), "\n".join(lines[: len(READY)])
    assert lines[len(READY) : -1] == OUTPUT
    assert ready[0] is not None and lines[-1] == f"Stopped the dev stack (pid {ready[0]['pid']})."
    assert done.stderr == ""
    assert left == [], "the block left processes running"


JSON_MARK = "<!-- stock-cli-json: tests/test_readme_stock_cli.py starts this run and checks its "


def stock_cli_runs() -> dict[str, list[str]]:
    """Each ``temporal workflow start`` the README marks for this test, by what it checks: its arguments."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    runs: dict[str, list[str]] = {}
    for part in readme.split(JSON_MARK)[1:]:
        checks, _, rest = part.partition(" -->\n")
        block = re.match(r"```sh\n(.*?)^```$", rest, re.S | re.M)
        assert block is not None, "a stock-cli-json mark must come right before a ```sh block"
        runs[checks] = shlex.split(block.group(1))
    return runs


async def start_as_the_readme_does(client: Client, task_queue: str, checks: str) -> tuple[str, dict[str, object]]:
    """Run the README's command on the test's task queue; the run's id and the JSON it started with."""
    command = stock_cli_runs()[checks]
    assert command[:4] == ["temporal", "workflow", "start", "--type"]
    arguments = command[1:]
    arguments[arguments.index("--task-queue") + 1] = task_queue
    at = arguments.index("--workflow-id") + 1
    run_id = arguments[at] = f"{arguments[at]}-{task_queue}"  # the session's server outlives this test's runs
    await asyncio.to_thread(stock_temporal, client, *arguments)
    return run_id, json.loads(arguments[arguments.index("--input") + 1])


def test_the_readme_marks_an_mcp_run_a_toolset_run_and_an_agent_run() -> None:
    assert sorted(stock_cli_runs()) == ["MCP call", "actions", "agent call", "registered agent call"]


async def test_the_readme_mcp_run_json_calls_the_servers_tool(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply([text("Looking."), tool_use("toolu_1", "lookup", {"city": "Paris"})], "tool_use"),
        end_turn("Paris: 21C."),
    )
    async with worker(mcp=config(tmp_path, "files")):
        run_id, run_input = await start_as_the_readme_does(client, task_queue, "MCP call")
        out = await asyncio.to_thread(stock_temporal, client, "workflow", "result", "--workflow-id", run_id)
    assert run_input["mcp"] == ["files"]
    assert json.loads(out)["result"]["status"] == "completed"
    assert [tool["name"] for tool in fake_api.bodies()[0]["tools"]] == [
        "lookup",
        "fail",
        "change_tools",
        "authorized",
        "die_once",
        "slow",
    ]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Paris: 21C"}]}
    ]


async def test_the_readme_toolset_run_json_runs_the_toolsets_actions(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    browser = RecordingBrowser()
    fake_api.script(
        Reply(
            [
                text("On it."),
                action("toolu_1", "browser", "navigate", {"url": "https://docs.example"}),
                action("toolu_2", "browser", "screenshot"),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(browser):
        run_id, run_input = await start_as_the_readme_does(client, task_queue, "actions")
        out = await asyncio.to_thread(stock_temporal, client, "workflow", "result", "--workflow-id", run_id)
    assert run_input["tools"] == ["browser"]
    assert json.loads(out)["result"]["status"] == "completed"
    assert fake_api.bodies()[0]["tools"] == [{"type": "browser_toolset_20260801"}]
    assert browser.actions == [("navigate", {"url": "https://docs.example"}, "toolu_1"), ("screenshot", {}, "toolu_2")]
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        toolset_result("toolu_1", "browser", "navigate done"),
        toolset_result("toolu_2", "browser", "screenshot done"),
    ]


SCHEDULE_MARK = (
    "<!-- stock-cli-schedule: tests/test_readme_stock_cli.py creates this schedule, fires it and checks its run -->\n"
)


def stock_cli_schedule_commands() -> list[list[str]]:
    """The README's ``temporal schedule`` commands (the block after the stock-cli-schedule mark), each as arguments."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(SCHEDULE_MARK) == 1, "README.md must mark exactly one stock-cli-schedule block"
    block = re.match(r"```sh\n(.*?)^```$", readme.split(SCHEDULE_MARK, 1)[1], re.S | re.M)
    assert block is not None, "the stock-cli-schedule mark must come right before a ```sh block"
    # A command ends where the next begins: the create command's JSON spans lines.
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(part, comments=True) for part in re.split(r"\n(?=temporal )", joined)]


async def test_the_readme_stock_cli_schedule_fires_a_run_that_finishes(
    client: Client, runner: AgentRunner, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    create, trigger, delete = stock_cli_schedule_commands()
    assert [c[:3] for c in (create, trigger, delete)] == [
        ["temporal", "schedule", "create"],
        ["temporal", "schedule", "trigger"],
        ["temporal", "schedule", "delete"],
    ]
    schedule_id = f"daily-digest-{task_queue}"  # the session's server outlives this test's schedule

    def ours(command: list[str]) -> list[str]:
        arguments = [schedule_id if a == "daily-digest" else a for a in command[1:]]
        if "--task-queue" in arguments:
            arguments[arguments.index("--task-queue") + 1] = task_queue
        return arguments

    fake_api.script(end_turn("Quiet day."))
    async with worker():
        await asyncio.to_thread(stock_temporal, client, *ours(create))
        try:
            await asyncio.to_thread(stock_temporal, client, *ours(trigger))
            async with asyncio.timeout(30):
                while not (fired := (await describe_schedule(runner, schedule_id)).recent_runs):
                    await asyncio.sleep(0.2)
            [run_id] = fired
            final = await runner.attach(run_id).until_done()
        finally:
            await asyncio.to_thread(stock_temporal, client, *ours(delete))
    assert run_id.startswith(f"{schedule_id}-")
    assert [block.model_dump(exclude_none=True) for block in final.content] == [{"type": "text", "text": "Quiet day."}]
    assert fake_api.bodies() == [
        {
            "model": "claude-sonnet-5-5",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Summarize the day."}],
            "thread": {"type": "create"},
            "tools": [],
            "stream": True,
        }
    ]
    with pytest.raises(ScheduleNotFound):
        await describe_schedule(runner, schedule_id)


async def test_the_readme_agent_run_json_runs_a_child_whose_answer_is_the_tool_result(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    def claude(body: dict[str, object]) -> ScriptItem:
        if body.get("system") == "You research.":
            return end_turn("Sunny, 21C.")
        if "tool_result" not in json.dumps(body["messages"]):  # on a thread, a later turn sends only what is new
            return Reply([tool_use("toolu_A", "researcher", {"task": "Weather in Paris?"})], "tool_use")
        return end_turn("It is sunny.")

    fake_api.responder = claude
    async with worker():
        run_id, run_input = await start_as_the_readme_does(client, task_queue, "agent call")
        out = await asyncio.to_thread(stock_temporal, client, "workflow", "result", "--workflow-id", run_id)
        status = await asyncio.to_thread(
            stock_temporal, client, "workflow", "query", "--workflow-id", run_id, "--name", "status"
        )
        child = await asyncio.to_thread(
            stock_temporal, client, "workflow", "result", "--workflow-id", f"{run_id}/toolu_A"
        )
    assert [agent["name"] for agent in run_input["agents"]] == ["researcher"]  # type: ignore[index]
    assert json.loads(out)["result"]["final_message"]["content"] == [{"type": "text", "text": "It is sunny."}]
    assert json.loads(status)["queryResult"][0]["agents"] == [
        {"id": f"{run_id}/toolu_A", "name": "researcher", "tool_use_id": "toolu_A", "status": "completed"}
    ]
    assert json.loads(child)["result"]["status"] == "completed"
    assert fake_api.bodies()[-1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_A", "content": "Sunny, 21C."}
    ]


def readme_agents_module() -> dict[str, object]:
    """The README's agents module (the Python block that opens with ``# my_agents.py``), run: its names."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"^```python\n(.*?)^```$", readme, re.S | re.M) if b.startswith("# my_agents.py")]
    names: dict[str, object] = {}
    exec(compile(block, "README.md: my_agents.py", "exec"), names)
    return names


async def test_the_readme_registered_agent_run_json_runs_the_workers_agent(
    client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    def claude(body: dict[str, object]) -> ScriptItem:
        if body.get("system") == "You research.":
            return end_turn("Sunny, 21C.")
        if "tool_result" not in json.dumps(body["messages"]):
            return Reply([tool_use("toolu_A", "researcher", {"task": "Weather in Paris?"})], "tool_use")
        return end_turn("It is sunny.")

    fake_api.responder = claude
    researcher = readme_agents_module()["researcher"]
    async with worker(get_weather, researcher):
        run_id, run_input = await start_as_the_readme_does(client, task_queue, "registered agent call")
        out = await asyncio.to_thread(stock_temporal, client, "workflow", "result", "--workflow-id", run_id)
    assert run_input["tools"] == ["researcher"]
    assert json.loads(out)["result"]["final_message"]["content"] == [{"type": "text", "text": "It is sunny."}]
    researcher_tools = [body["tools"] for body in fake_api.bodies() if body.get("system") == "You research."]
    assert researcher_tools == [[get_weather.to_dict()]]  # the agent's settings are the worker's
    lead = [body for body in fake_api.bodies() if body.get("system") is None]
    assert lead[0]["tools"] == [
        {
            "name": "researcher",
            "description": "Answers one question.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "task": {
                        "type": "string",
                        "description": "What the agent should do, with everything it needs to know.",
                    }
                },
                "required": ["task"],
            },
        }
    ]
    assert lead[-1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_A", "content": "Sunny, 21C."}
    ]
