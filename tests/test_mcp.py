"""MCP servers as tools: a real MCP server process (``tests/mcp_server.py``, stdio) behind the workers.

Each test gives its worker a configuration naming that server (``agent_runner.mcp_config``), so the worker starts
it as a child process; the server notes every call it gets in ``calls`` under the test's folder.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_tool
from mcp.shared.exceptions import MCPDeprecationWarning
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.cli import build_parser, build_run_input
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import AgentRunError, ConfigurationError, InvalidRunInput, ToolNotRegistered
from agent_runner.contract.run_input import parse_run_input
from agent_runner.contract.types import CALL_MCP_TOOL_ACTIVITY, LIST_MCP_TOOLS_ACTIVITY
from agent_runner.mcp_config import McpConfig, load_mcp_config, parse_mcp_config
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.temporal_server import free_port
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_worker
from agent_runner.workflows import mcp as mcp_workflows
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import (
    WorkerFactory,
    anthropic_client_factory,
    history_text,
    scheduled_activities,
    started_attempts,
)
from tests.heartbeat_support import Heartbeats
from tests.test_durability import wait_for, worker_process
from tests.test_mixed_fleet import another_client, handed_back, until_pending

SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")
BASE = {"model": "claude-fake-1", "max_tokens": 1024, "thread": False}
USER = {"role": "user", "content": "Weather in Paris?"}
SECRET = "s3cret-token-4242"


def definition(name: str, description: str, properties: dict[str, Any], title: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if properties:
        schema["required"] = list(properties)
    return {"name": name, "description": description, "input_schema": {**schema, "title": title}}


def server_tools(prefix: str = "") -> list[dict[str, Any]]:
    """The test server's tools as Claude is offered them (the SDK's ``mcp_tool`` definitions)."""
    return [
        definition(
            f"{prefix}lookup",
            "Look up a city's weather.",
            {"city": {"title": "City", "type": "string"}},
            "lookupArguments",
        ),
        definition(
            f"{prefix}fail", "Always fails.", {"reason": {"title": "Reason", "type": "string"}}, "failArguments"
        ),
        definition(f"{prefix}change_tools", "Withdraw lookup and offer late instead.", {}, "change_toolsArguments"),
        definition(
            f"{prefix}authorized",
            "Whether the worker gave this server the expected credential.",
            {},
            "authorizedArguments",
        ),
        definition(
            f"{prefix}die_once",
            "The first call kills the server mid-call; later ones (a new process) answer.",
            {"what": {"title": "What", "type": "string"}},
            "die_onceArguments",
        ),
        definition(
            f"{prefix}slow", "Takes two seconds.", {"what": {"title": "What", "type": "string"}}, "slowArguments"
        ),
    ]


def config(folder: Path, *names: str, **policy: Any) -> McpConfig:
    """A worker configuration: the test server under each of ``names``, its token read from the environment."""
    folder.mkdir(exist_ok=True)
    (folder / "expected_token.txt").write_text(SECRET)
    server = {
        "command": sys.executable,
        "args": [SERVER],
        "env": {"MCP_TEST_DIR": str(folder), "MCP_TEST_TOKEN": "${TEST_MCP_TOKEN}"},
        **policy,
    }
    return parse_mcp_config({"mcpServers": dict.fromkeys(names or ("files",), server)}, {"TEST_MCP_TOKEN": SECRET})


def calls(folder: Path) -> list[str]:
    path = folder / "calls"
    return path.read_text().splitlines() if path.exists() else []


def result(tool_use_id: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    return {**block, "is_error": True} if is_error else block


def results_sent(fake: FakeMessagesAPI, request: int = 1) -> list[dict[str, Any]]:
    """The tool results the ``request``-th request (from 0) sent, in its last message."""
    content: list[dict[str, Any]] = fake.bodies()[request]["messages"][-1]["content"]
    return content


async def test_a_servers_tools_are_offered_and_called_with_the_sdks_results(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(
            content=[
                tool_use("toolu_1", "lookup", {"city": "Paris"}),
                tool_use("toolu_2", "fail", {"reason": "disk full"}),
                tool_use("toolu_3", "authorized", {}),
            ],
            stop_reason="tool_use",
        ),
        end_turn("Sunny."),
    )
    async with worker(mcp=config(tmp_path)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await run.until_done()
    assert [body["tools"] for body in fake_api.bodies()] == [server_tools(), server_tools()]
    assert results_sent(fake_api) == [
        result("toolu_1", [{"type": "text", "text": "Paris: 21C"}]),
        # isError: the server's content, with is_error, as the SDK's mcp_tool gives it
        result("toolu_2", [{"type": "text", "text": "Error executing tool fail: disk full"}], is_error=True),
        result("toolu_3", [{"type": "text", "text": "authorized"}]),
    ]
    # One call each (the three calls run at once, so the server may get them in any order).
    assert sorted(calls(tmp_path)) == ["fail disk full", "lookup Paris"]
    # The server got its token from the worker's configuration; the run's history never holds it.
    history = history_text(await client.get_workflow_handle(run.id).fetch_history())
    assert SECRET not in history
    assert "MCP_TEST_TOKEN" not in history


async def test_the_list_a_run_sees_is_pinned_when_it_starts(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The server withdraws ``lookup`` and adds ``late`` mid-run: the run is offered its first list to the end."""
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "change_tools", {})], stop_reason="tool_use"),
        Reply(content=[tool_use("toolu_2", "lookup", {"city": "Paris"})], stop_reason="tool_use"),
        end_turn("Done."),
        end_turn("Later."),
    )
    async with worker(mcp=config(tmp_path)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await run.until_done()
        later = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await later.until_done()
    bodies = fake_api.bodies()
    assert [body["tools"] for body in bodies[:3]] == [server_tools()] * 3
    assert results_sent(fake_api, 1) == [result("toolu_1", [{"type": "text", "text": "changed"}])]
    # The call goes to the server, which no longer has the tool: its own error, as a result.
    assert results_sent(fake_api, 2) == [
        result("toolu_2", [{"type": "text", "text": "Unknown tool: lookup"}], is_error=True)
    ]
    # A run started after the change sees the server's new list.
    late = {"name": "late", "description": "A tool the server offers only after change_tools.", "input_schema": {}}
    late["input_schema"] = {"type": "object", "properties": {}, "title": "lateArguments"}
    assert bodies[3]["tools"] == [*server_tools()[1:], late]
    # The run's history replays on the current code, the pinned list included.
    history = await client.get_workflow_handle(run.id).fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_a_streamable_http_server_gets_its_token_as_a_header_from_the_workers_configuration(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    (tmp_path / "expected_token.txt").write_text(SECRET)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], env={**os.environ, "MCP_TEST_DIR": str(tmp_path)}
    )
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.05)
        http = {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer ${TEST_MCP_TOKEN}"}}
        mcp = parse_mcp_config({"mcpServers": {"remote": http}}, {"TEST_MCP_TOKEN": SECRET})
        fake_api.script(
            Reply(
                content=[tool_use("toolu_1", "lookup", {"city": "Oslo"}), tool_use("toolu_2", "authorized", {})],
                stop_reason="tool_use",
            ),
            end_turn("Cold."),
        )
        async with worker(mcp=mcp):
            run = await runner.start(**BASE, messages=[USER], mcp=["remote"])
            await run.until_done()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert fake_api.bodies()[0]["tools"] == server_tools()
    assert results_sent(fake_api) == [
        result("toolu_1", [{"type": "text", "text": "Oslo: 21C"}]),
        result("toolu_2", [{"type": "text", "text": "authorized"}]),
    ]
    history = history_text(await client.get_workflow_handle(run.id).fetch_history())
    assert SECRET not in history


@beta_tool
def lookup(city: str) -> str:
    """A registered tool whose name an MCP server's tool has too.

    Args:
        city: The city.
    """
    return f"registered lookup of {city}"


async def test_colliding_names_get_their_servers_name_before_them(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(
            content=[
                tool_use("toolu_1", "lookup", {"city": "Paris"}),
                tool_use("toolu_2", "b__lookup", {"city": "Rome"}),
            ],
            stop_reason="tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(lookup, mcp=config(tmp_path, "a", "b")):
        run = await runner.start(**BASE, messages=[USER], tools=["lookup"], mcp=["a", "b"])
        await run.until_done()
    registered = {
        "name": "lookup",
        "description": "A registered tool whose name an MCP server's tool has too.",
        "input_schema": {
            "additionalProperties": False,
            "properties": {"city": {"description": "The city.", "title": "City", "type": "string"}},
            "required": ["city"],
            "type": "object",
        },
    }
    assert fake_api.bodies()[0]["tools"] == [registered, *server_tools("a__"), *server_tools("b__")]
    assert results_sent(fake_api) == [
        result("toolu_1", "registered lookup of Paris"),
        result("toolu_2", [{"type": "text", "text": "Rome: 21C"}]),
    ]


async def test_a_server_no_worker_is_configured_with_fails_the_run_saying_so(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    async with worker(mcp=config(tmp_path)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files", "github"])
        with pytest.raises(ToolNotRegistered) as raised:
            await run.until_done()
    assert str(raised.value) == (
        f"No worker on task queue {runner.task_queue!r} is configured with MCP server 'github' (they have 'files'). "
        "Add it to the file the workers get as --mcp-config (or AGENT_RUNNER_MCP_CONFIG), or leave it out of the "
        "run's `mcp`."
    )
    assert fake_api.bodies() == []  # nothing was sent to Claude


async def test_a_server_only_some_workers_are_configured_with_is_listed_by_one_of_them(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """A rollout that adds a server: a worker configured without it hands the listing back to the queue, for one
    configured with it, as a worker without any configuration does."""
    fake_api.script(end_turn("Sunny."))
    other = await another_client(client)
    async with worker(mcp=config(tmp_path, "files")):  # the older configuration: no `github`
        run = await runner.start(**BASE, messages=[USER], mcp=["github"])
        await handed_back(run, LIST_MCP_TOOLS_ACTIVITY)
        newer = config(tmp_path, "files", "github")
        async with build_worker(other, task_queue=runner.task_queue, serve=("tools",), mcp=newer):
            final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "Sunny."
    assert [body["tools"] for body in fake_api.bodies()] == [server_tools()]


async def test_a_server_named_on_workers_with_no_mcp_configuration_fails_the_run_within_seconds_saying_so(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with no MCP configuration hands the listing back to the queue, a second later each time, and its
    last attempt says no worker has the server: it used to leave Temporal retrying an activity it had not registered
    for a minute, then fail with ``NotFoundError``. With the runner's 10 attempts that takes about 9 s; 3 here."""
    monkeypatch.setattr(mcp_workflows, "LIST_RETRY", dataclasses.replace(mcp_workflows.LIST_RETRY, maximum_attempts=3))
    async with worker():
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        with pytest.raises(ToolNotRegistered) as raised:
            await asyncio.wait_for(run.until_done(), 5)
        history = await run.handle.fetch_history()
    assert str(raised.value) == (
        f"No worker on task queue {runner.task_queue!r} is configured with MCP server 'files' (they have none). "
        "Add it to the file the workers get as --mcp-config (or AGENT_RUNNER_MCP_CONFIG), or leave it out of the "
        "run's `mcp`."
    )
    assert started_attempts(history) == {"agent_runner.list_mcp_tools": [3]}  # handed back twice, then answered
    assert fake_api.bodies() == []  # nothing was sent to Claude


async def test_a_worker_with_no_mcp_configuration_leaves_the_listing_to_one_of_the_queue_that_has_it(
    runner: AgentRunner,
    client: Client,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fleet whose workers without MCP configuration share the run's queue with one that has it: the listing one of
    them gets goes back to the queue, and the worker with the configuration lists the tools."""
    # More attempts than the runner's 10: which worker the queue offers each to is chance, and the test must not be.
    monkeypatch.setattr(mcp_workflows, "LIST_RETRY", dataclasses.replace(mcp_workflows.LIST_RETRY, maximum_attempts=50))
    fake_api.script(end_turn("Sunny."))
    other = await another_client(client)
    async with worker():  # every role, no MCP configuration
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await handed_back(run, LIST_MCP_TOOLS_ACTIVITY)
        with_servers = build_worker(other, task_queue=runner.task_queue, serve=("tools",), mcp=config(tmp_path))
        async with with_servers:
            final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "Sunny."
    assert [body["tools"] for body in fake_api.bodies()] == [server_tools()]


async def test_a_call_of_a_servers_tool_goes_only_to_workers_configured_with_the_server(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """A fleet whose workers share the run's queue, one of them without the MCP configuration: the calls of the
    server's tools go to a queue only configured workers poll (``mcp_task_queue``). So a call made while no configured
    worker is up waits for one, and never reaches the worker without the configuration, where it would fail (an
    ``at_most_once`` call's outcome would then be unknown, and Claude told so)."""
    replied = threading.Event()
    fake_api.script(
        Reply([tool_use("toolu_1", "lookup", {"city": "Paris"})], "tool_use", until=replied), end_turn("Sunny.")
    )
    other = await another_client(client)
    servers = config(tmp_path, effects="at_most_once")
    async with worker():  # every role, no MCP configuration
        try:
            async with build_worker(other, task_queue=runner.task_queue, serve=("tools",), mcp=servers):
                run = await runner.start(**BASE, messages=[USER], mcp=["files"])
                await wait_for(lambda: len(fake_api.requests) == 1, "the first request")  # the tools are listed
        finally:
            replied.set()  # the configured worker is gone before Claude's reply calls the tool
        await until_pending(run, CALL_MCP_TOOL_ACTIVITY)
        await asyncio.sleep(1.0)  # time for the worker without the configuration to take it, were it offered
        assert (calls(tmp_path), (await run.status()).status) == ([], "running")
        async with build_worker(other, task_queue=runner.task_queue, serve=("tools",), mcp=servers):
            await run.until_done()
    assert results_sent(fake_api) == [result("toolu_1", [{"type": "text", "text": "Paris: 21C"}])]
    assert calls(tmp_path) == ["lookup Paris"]


def test_the_runs_mcp_is_a_list_of_server_names() -> None:
    with pytest.raises(InvalidRunInput) as raised:
        parse_run_input({**BASE, "messages": [USER], "mcp": "files"})
    assert str(raised.value) == (
        "The run's input was rejected:\n- `mcp` must be a list of distinct names of MCP servers the workers are "
        'configured with, such as ["files"].'
    )
    assert parse_run_input({**BASE, "messages": [USER], "mcp": ["files"]}).mcp == ["files"]


def test_a_configuration_is_checked_when_the_worker_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_mcp_config(
            {
                "mcpServers": {
                    "both": {"command": "x", "url": "https://mcp.example.test/mcp"},
                    "secret": {"url": "https://mcp.example.test/mcp", "headers": {"Authorization": "Bearer ${TOK}"}},
                    "policy": {"command": "x", "maximum_attempts": -1, "effects": "twice"},
                }
            },
            {},
        )
    assert str(raised.value) == (
        "MCP configuration was rejected:\n"
        "- server 'both': Value error, give either `command` (a stdio server) or `url` (a streamable HTTP server), "
        "not both\n"
        "- server 'secret' reads TOK from the environment, which is not set: set it in the worker's environment\n"
        "- server 'policy' `maximum_attempts`: Input should be greater than or equal to 0\n"
        "- server 'policy' `effects`: Input should be 'idempotent' or 'at_most_once'"
    )
    toml = tmp_path / "mcp.toml"
    toml.write_text(
        '[mcp_servers.files]\ncommand = "python"\nargs = ["server.py"]\nmaximum_attempts = 3\n'
        '[mcp_servers.files.tools.delete]\neffects = "at_most_once"\nrequires_approval = true\n'
    )
    loaded = load_mcp_config(toml)
    options, approval, effects, on_unknown = loaded.servers["files"].policy("delete")
    assert (options.maximum_attempts, approval, effects, on_unknown) == (3, True, "at_most_once", "tell")
    assert loaded.servers["files"].policy("read")[1:] == (False, "idempotent", "tell")
    with pytest.raises(ConfigurationError, match="is not valid JSON"):
        (tmp_path / "mcp.json").write_text("{")
        load_mcp_config(tmp_path / "mcp.json")


@pytest.mark.slow
async def test_a_server_that_dies_mid_call_is_called_again_on_a_new_process(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "die_once", {"what": "x"})], stop_reason="tool_use"), end_turn("ok")
    )
    async with worker(mcp=config(tmp_path, initial_interval=0.5)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await run.until_done()
    assert results_sent(fake_api) == [result("toolu_1", [{"type": "text", "text": "survived x"}])]
    assert calls(tmp_path) == ["die_once x", "die_once x"]  # the first process died in it; a new one answered


@pytest.mark.slow
async def test_an_at_most_once_tool_whose_server_dies_mid_call_is_not_called_again(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "die_once", {"what": "x"})], stop_reason="tool_use"), end_turn("ok")
    )
    async with worker(mcp=config(tmp_path, tools={"die_once": {"effects": "at_most_once"}})):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await run.until_done()
    assert results_sent(fake_api) == [
        result(
            "toolu_1",
            "Error: The outcome of this call of 'die_once' is unknown: MCP server 'files' failed during the call of "
            "'die_once': the connection closed. The next attempt opens a new connection. It may or may not have "
            "taken effect, and it was not run again. Check before calling it again.",
            is_error=True,
        )
    ]
    assert calls(tmp_path) == ["die_once x"]


@pytest.mark.slow
async def test_an_at_most_once_call_to_a_server_that_died_while_idle_runs_on_a_new_process(
    runner: AgentRunner,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    tmp_path: Path,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """The request never left the worker, so the call is not "outcome unknown": it goes to a new server process.

    The worker found the server gone by a ping, through no API the ``mcp`` package warns is deprecated.
    """
    folder = tmp_path / "server"

    @beta_tool
    def kill_server() -> str:
        """Kill the MCP server's process while no call runs."""
        pid = int((folder / "pids").read_text().split()[-1])
        os.kill(pid, signal.SIGKILL)
        return "killed"

    fake_api.script(
        Reply(content=[tool_use("toolu_1", "lookup", {"city": "Paris"})], stop_reason="tool_use"),
        Reply(content=[tool_use("toolu_2", "kill_server", {})], stop_reason="tool_use"),
        Reply(content=[tool_use("toolu_3", "lookup", {"city": "Rome"})], stop_reason="tool_use"),
        end_turn("ok"),
    )
    async with worker(kill_server, mcp=config(folder, tools={"lookup": {"effects": "at_most_once"}})):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"], tools=[kill_server])
        await run.until_done()
    assert results_sent(fake_api, 3) == [result("toolu_3", [{"type": "text", "text": "Rome: 21C"}])]
    assert calls(folder) == ["lookup Paris", "lookup Rome"]
    assert len((folder / "pids").read_text().split()) == 2  # the dead one, and the one that answered
    assert [str(w.message) for w in recwarn if issubclass(w.category, MCPDeprecationWarning)] == []


async def test_a_call_heartbeats_at_least_twice_per_its_servers_heartbeat_timeout(
    runner: AgentRunner, client: Client, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """The worker heartbeats for an MCP call at least twice per the heartbeat timeout its server's configuration
    gives (here 1 s, for a 2 s call: every second would leave no slack), so the call is made once."""
    log = Heartbeats(CALL_MCP_TOOL_ACTIVITY)
    fake_api.script(Reply(content=[tool_use("toolu_1", "slow", {"what": "x"})], stop_reason="tool_use"), end_turn("ok"))
    plugin = AgentRunnerPlugin(
        mcp=config(tmp_path, heartbeat_timeout=1), claude=ClaudeActivities(anthropic_client_factory(fake_api))
    )
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[log]):
        await (await runner.start(**BASE, messages=[USER], mcp=["files"])).until_done()
    ((_, *beats),) = log.beats
    assert len(beats) >= 3, beats
    assert all(later - earlier <= 0.75 for earlier, later in itertools.pairwise([0.0, *beats])), beats
    assert calls(tmp_path) == ["slow x"]
    assert results_sent(fake_api) == [result("toolu_1", [{"type": "text", "text": "slow x"}])]


def test_the_worker_reads_its_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"files": {"url": "http://127.0.0.1:1/mcp"}}}))
    assert load_mcp_config(path).servers["files"].url == "http://127.0.0.1:1/mcp"


@pytest.mark.slow
async def test_a_worker_killed_mid_call_leaves_the_call_to_another_worker_and_its_own_server(
    runner: AgentRunner, temporal_address: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """``python worker.py --mcp-config``, killed with ``-9`` while its server runs a call: the next worker starts its
    own server process and makes the call again, and Claude gets what an uninterrupted run would have sent."""
    config_file = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [SERVER], "env": {"MCP_TEST_DIR": str(tmp_path)}}
    config_file.write_text(json.dumps({"mcpServers": {"files": {**server, "heartbeat_timeout": 5}}}))
    fake_api.script(Reply(content=[tool_use("toolu_1", "slow", {"what": "x"})], stop_reason="tool_use"), end_turn("ok"))
    log = tmp_path / "worker.log"
    args = ("--mcp-config", str(config_file))
    with worker_process(temporal_address, runner.task_queue, fake_api, tmp_path / "marks", log, *args) as first:
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await wait_for(lambda: calls(tmp_path) == ["slow x"], "the call reaching the server")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with worker_process(temporal_address, runner.task_queue, fake_api, tmp_path / "marks", log, *args):
        final = await run.until_done()
    assert final.content[0].type == "text" and final.content[0].text == "ok"
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "slow", "input": {"what": "x"}}],
    }
    answer = {"role": "user", "content": [result("toolu_1", [{"type": "text", "text": "slow x"}])]}
    body = {"model": "claude-fake-1", "max_tokens": 1024, "tools": server_tools(), "stream": True}
    assert fake_api.bodies() == [{**body, "messages": [USER]}, {**body, "messages": [USER, call, answer]}]
    assert calls(tmp_path) == ["slow x", "slow x"]  # idempotent: made again by the second worker's server


def test_agent_runner_run_names_the_servers_with_mcp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_RUNNER_MODEL", raising=False)
    args = build_parser().parse_args(["run", "Hi", "--mcp", "files", "linear"])
    assert build_run_input(args) == {
        "model": "claude-sonnet-5-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Hi"}],
        "mcp": ["files", "linear"],
    }


async def test_the_pinned_list_and_its_calls_survive_continue_as_new(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(content=[tool_use("toolu_1", "change_tools", {})], stop_reason="tool_use"),
        Reply(content=[tool_use("toolu_2", "fail", {"reason": "after"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(mcp=config(tmp_path)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"], continue_as_new={"events": 10})
        await run.until_done()
        status = await run.status()
    assert status.continuations >= 1
    assert [body["tools"] for body in fake_api.bodies()] == [server_tools()] * 3  # not the server's new list
    assert results_sent(fake_api, 2) == [
        result("toolu_2", [{"type": "text", "text": "Error executing tool fail: after"}], is_error=True)
    ]
    assert calls(tmp_path) == ["change_tools", "fail after"]


async def test_each_call_is_an_activity_under_the_policy_the_configuration_gives_its_tool(
    runner: AgentRunner, client: Client, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    fake_api.script(
        Reply(
            content=[tool_use("toolu_1", "lookup", {"city": "Paris"}), tool_use("toolu_2", "fail", {"reason": "x"})],
            stop_reason="tool_use",
        ),
        end_turn("Done."),
    )
    policy = {"maximum_attempts": 4, "tools": {"fail": {"start_to_close_timeout": "PT7S", "heartbeat_timeout": 3}}}
    async with worker(mcp=config(tmp_path, **policy)):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        await run.until_done()
    history = await client.get_workflow_handle(run.id).fetch_history()
    calls_scheduled = scheduled_activities(history, "agent_runner.call_mcp_tool")
    # (timeout in seconds, heartbeat timeout, attempts): the tool's own timeout plus the 10 s the worker is given to
    # report it (TOOL_TIMEOUT_GRACE), as for a registered tool.
    assert sorted(
        (a.start_to_close_timeout.seconds, a.heartbeat_timeout.seconds, a.retry_policy.maximum_attempts)
        for a in calls_scheduled
    ) == [(17, 3, 4), (310, 30, 4)]
    assert len(scheduled_activities(history, "agent_runner.list_mcp_tools")) == 1


async def test_a_server_whose_command_cannot_run_fails_the_run_at_once_saying_so(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-server")
    async with worker(mcp=parse_mcp_config({"mcpServers": {"files": {"command": missing}}})):
        run = await runner.start(**BASE, messages=[USER], mcp=["files"])
        with pytest.raises(AgentRunError) as raised:
            await run.until_done()
    assert str(raised.value) == (
        "Could not list the tools of MCP server 'files': could not connect: FileNotFoundError(2, 'No such file or "
        "directory'). Check the server and the workers' MCP configuration (the worker's log has the server's own "
        "output)."
    )
    assert fake_api.bodies() == []


@pytest.mark.slow
async def test_a_server_that_cannot_be_reached_is_asked_10_times_then_the_run_fails_saying_so(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that may come back (nothing answers at its address) is asked again, 10 times in all, never for ever;
    then the run fails with the last attempt's error, before any request to Claude."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(mcp_workflows, "LIST_RETRY", dataclasses.replace(mcp_workflows.LIST_RETRY, **quick))
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    async with worker(mcp=parse_mcp_config({"mcpServers": {"remote": {"url": url}}})):
        run = await runner.start(**BASE, messages=[USER], mcp=["remote"])
        with pytest.raises(AgentRunError) as raised:
            await run.until_done()
        history = await run.handle.fetch_history()
    assert started_attempts(history) == {"agent_runner.list_mcp_tools": [10]}
    assert str(raised.value) == (
        "agent_runner.list_mcp_tools gave up: its maximum_attempts were spent, and the last attempt failed "
        "(McpServerLost: Could not list the tools of MCP server 'remote': could not connect: ConnectError('All "
        "connection attempts failed'). Check the server and the workers' MCP configuration (the worker's log has the "
        "server's own output)). Fix what it says on the workers (their logs have each attempt), then start the run "
        "again or fork it."
    )
    assert fake_api.bodies() == []


async def test_an_agent_uses_the_mcp_servers_it_names(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        if body.get("system") == "You lead.":
            if len(body["messages"]) == 1:
                return Reply(content=[tool_use("toolu_P", "researcher", {"task": "Paris"})], stop_reason="tool_use")
            return end_turn("Done.")
        if len(body["messages"]) == 1:
            return Reply(content=[tool_use("toolu_C", "lookup", {"city": "Paris"})], stop_reason="tool_use")
        return end_turn("Paris: 21C, says the server.")

    fake_api.responder = respond
    researcher = {"name": "researcher", "description": "Researches.", "system": "You research.", "mcp": ["files"]}
    async with worker(mcp=config(tmp_path)):
        run = await runner.start(**BASE, system="You lead.", messages=[USER], agents=[researcher])
        await run.until_done()
    child = [b for b in fake_api.bodies() if b.get("system") == "You research."]
    assert [b["tools"] for b in child] == [server_tools(), server_tools()]
    assert child[1]["messages"][-1]["content"] == [result("toolu_C", [{"type": "text", "text": "Paris: 21C"}])]
    assert results_sent(fake_api, -1) == [result("toolu_P", "Paris: 21C, says the server.")]
    assert calls(tmp_path) == ["lookup Paris"]


def test_failure_messages_never_carry_the_configurations_secrets() -> None:
    from agent_runner.activities.mcp import McpConnection

    server = {"url": "https://u:pw1234@mcp.example.test/mcp?key=abcd1234", "headers": {"Authorization": "Bearer zz99"}}
    connection = McpConnection("x", parse_mcp_config({"mcpServers": {"x": server}}).servers["x"])
    error = RuntimeError("401 from https://u:pw1234@mcp.example.test/mcp?key=abcd1234 with Bearer zz99")
    assert connection.scrub(error) == "RuntimeError('401 from https://u:***@mcp.example.test/mcp?key=*** with ***')"
