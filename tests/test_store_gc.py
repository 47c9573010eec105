"""`agent-runner store gc` (agent_runner/gc.py, ContentStore.sweep): content no open or recently closed run references
is removed; what an open run needs, and what was written within the window, stays; a dry run removes nothing.

The end-to-end test runs the real CLI in a subprocess against the session's Temporal dev server, on a SQLite file and
on an encrypted PostgreSQL database, while a step-mode run stays open; age is simulated by a retention of 0s and by
moving the runs' write times two hours back (past the default grace of an hour)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from anthropic import beta_async_tool
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import Tool, ToolRegistry
from agent_runner.client import AgentRunner, Run
from agent_runner.codec import KEYS_ENV, new_key
from agent_runner.connection import data_converter
from agent_runner.content import Content
from agent_runner.contract.errors import BlobMissing
from agent_runner.contract.types import WORKFLOW_TYPE
from agent_runner.store import ChainNode, ContentStore, Swept, open_store, ref_for
from agent_runner.temporal_server import EmbeddedTemporal
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory
from tests.store_support import fresh_database

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgresql-encrypted"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh store's URL and the environment it is used with (encryption keys or none)."""
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path}/store.db", {}
        return
    for url in fresh_database(request.getfixturevalue("postgres_url"), "gc"):
        yield url, {KEYS_ENV: f"k1:{new_key()}"}


def rows(url: str) -> tuple[dict[str, int], set[str]]:
    """The store's blobs (stored key -> stored size) and chain nodes (stored head), read from the database itself."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            blobs = dict(conn.execute("SELECT ref, length(data) FROM blobs"))
            heads = {head for (head,) in conn.execute("SELECT head FROM nodes")}
        return blobs, heads
    with psycopg.connect(url) as conn:
        blobs = {ref: size for ref, size in conn.execute("SELECT ref, octet_length(data) FROM blobs")}
        heads = {head for (head,) in conn.execute("SELECT head FROM nodes")}
    return blobs, heads


def age(url: str, seconds: float) -> None:
    """Make everything the store holds ``seconds`` older, as if written that long ago."""
    statements = [f"UPDATE {table} SET written_at = written_at - {seconds}" for table in ("blobs", "nodes")]
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    with psycopg.connect(url) as conn:
        for statement in statements:
            conn.execute(statement)


def worker_with_store(client: Client, fake: FakeMessagesAPI, queue: str, store: ContentStore, *tools: Tool) -> Worker:
    """A worker whose Claude is the fake API, on ``store``, with a fresh cache (so it reads what the store holds)."""
    return build_worker(
        client,
        registry=ToolRegistry(tools),
        task_queue=queue,
        claude=ClaudeActivities(anthropic_client_factory(fake)),
        store=store,
    )


def gc_cli(client: Client, url: str, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`agent-runner store gc ...` in a process of its own, as an operator's cron job runs it."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "AGENT_RUNNER_STORE": url,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        **environ,
    }
    return subprocess.run(
        [sys.executable, "-m", "agent_runner.cli", "store", "gc", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def wait_status(run: Run, status: str, iterations: int) -> None:
    async with asyncio.timeout(20):
        while (current := await run.status()).status != status or current.iterations != iterations:
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture
async def left_open(temporal_env: WorkflowEnvironment) -> AsyncIterator[list[str]]:
    """Run ids to terminate after the test, should it fail with them open: later collections must not see them."""
    ids: list[str] = []
    yield ids
    for run_id in ids:
        with contextlib.suppress(Exception):  # closed already: the test went to the end
            await temporal_env.client.get_workflow_handle(run_id).terminate("left open by a failed test")


async def open_runs(client: Client) -> int:
    """Runs of the session's server that gc must count: those open (a retention of 0s keeps no closed one)."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
    return len([execution async for execution in client.list_workflows(query)])


async def test_gc_removes_a_closed_runs_content_and_keeps_an_open_runs_and_fresh_writes(
    temporal_env: WorkflowEnvironment,
    fake_api: FakeMessagesAPI,
    setup: tuple[str, dict[str, str]],
    left_open: list[str],
) -> None:
    """An old, closed run's content goes; an open run's stays and the run carries on; a just-written blob stays."""
    url, environ = setup
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, data_converter=data_converter(environ)
    )
    queue = f"gc-{uuid.uuid4()}"
    fake_api.script(end_turn("The old answer."), end_turn("The open answer."), end_turn("The last answer."))
    store = open_store(url, environ=environ)
    async with store:
        async with worker_with_store(client, fake_api, queue, store):
            old = await AgentRunner(client, task_queue=queue, store=store).start(
                model="claude-fake-old", max_tokens=64, messages=[{"role": "user", "content": "An old question."}]
            )
            await old.until_done()
            old_blobs, old_heads = rows(url)
            live = await AgentRunner(client, task_queue=queue, store=store).start(
                model="claude-fake-live",
                max_tokens=64,
                messages=[{"role": "user", "content": "A question still open."}],
                step=True,
            )
            left_open.append(live.id)
            await wait_status(live, "waiting_for_step", 1)
        all_blobs, all_heads = rows(url)
        live_blobs = {key: size for key, size in all_blobs.items() if key not in old_blobs}
        live_heads = all_heads - old_heads
        assert (
            old_blobs and old_heads and live_blobs and live_heads and len(all_blobs) == len(old_blobs) + len(live_blobs)
        )

        age(url, 2 * 3600)  # the two runs' writes are now older than the grace
        # What a model call stores before its result reaches history: referenced by nothing yet.
        in_flight = await Content(store).put_value({"role": "assistant", "content": f"in flight {uuid.uuid4()}"})
        fresh_blobs, _ = rows(url)
        (in_flight_key,) = set(fresh_blobs) - set(all_blobs)
        runs = await open_runs(client)
        kept = (
            f"kept {len(live_blobs)} blobs and {len(live_heads)} chain nodes referenced by {runs} runs, and what was "
            "written within the retention\n"
        )
        removed = f"{len(old_blobs)} blobs ({sum(old_blobs.values())} bytes) and {len(old_heads)} chain nodes; "

        dry = gc_cli(client, url, environ, "--retention", "0s", "--dry-run")
        assert (dry.returncode, dry.stderr, dry.stdout) == (0, "", f"would remove {removed}{kept}")
        assert rows(url) == (fresh_blobs, all_heads)

        done = gc_cli(client, url, environ, "--retention", "0s")
        assert (done.returncode, done.stderr, done.stdout) == (0, "", f"removed {removed}{kept}")
        assert rows(url) == ({**live_blobs, in_flight_key: fresh_blobs[in_flight_key]}, live_heads)
        assert (await store.get([in_flight]))[in_flight]

        # A new worker and a new client cache: everything below is read from the store.
        async with worker_with_store(client, fake_api, queue, store):
            reader = AgentRunner(client, task_queue=queue, store=store)
            await reader.attach(live.id).inject("Go on.", wait=False)  # it applies once the run is advanced
            await reader.attach(live.id).advance()
            await wait_status(live, "waiting_for_step", 2)
            await reader.attach(live.id).advance()
            await live.until_done()
            transcript = await AgentRunner(client, task_queue=queue, store=store).attach(live.id).transcript()
            with pytest.raises(BlobMissing):
                await AgentRunner(client, task_queue=queue, store=store).attach(old.id).transcript()
    assert [m["content"] for m in transcript] == [
        "A question still open.",
        [{"type": "text", "text": "The open answer."}],
        [{"type": "text", "text": "Go on."}],
        [{"type": "text", "text": "The last answer."}],
    ]


async def test_gc_keeps_a_run_closed_within_the_retention_though_its_writes_are_older(
    fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """A run that closed within the retention still counts, whenever its content was written; past it, it does not.

    On a Temporal server of its own: the session's runs closed within the retention would count too (some of them
    with histories encrypted under keys this test does not have).
    """
    url = f"sqlite://{tmp_path}/store.db"
    temporal = EmbeddedTemporal(tmp_path / "temporal.db")
    await temporal.astart()
    try:
        client = await Client.connect(temporal.address, data_converter=data_converter({}))
        await _closed_within_the_retention(client, fake_api, url)
    finally:
        await temporal.astop()


async def _closed_within_the_retention(client: Client, fake_api: FakeMessagesAPI, url: str) -> None:
    queue = f"gc-{uuid.uuid4()}"
    fake_api.script(end_turn("A recent answer."))
    store = open_store(url, environ={})
    async with store:
        async with worker_with_store(client, fake_api, queue, store):
            run = await AgentRunner(client, task_queue=queue, store=store).start(
                model="claude-fake-recent", max_tokens=64, messages=[{"role": "user", "content": "A recent question."}]
            )
            await run.until_done()
        blobs, heads = rows(url)
        assert blobs and heads
        age(url, 3 * 3600)  # written three hours ago (past the grace), closed seconds ago

        kept = gc_cli(client, url, {}, "--retention", "2h")
        assert (kept.returncode, kept.stderr, kept.stdout) == (
            0,
            "",
            f"removed 0 blobs (0 bytes) and 0 chain nodes; kept {len(blobs)} blobs and {len(heads)} chain nodes "
            "referenced by 1 runs, and what was written within the retention\n",
        )
        assert rows(url) == (blobs, heads)
        async with worker_with_store(client, fake_api, queue, open_store(url, environ={})):  # a fresh cache
            reader = AgentRunner(client, task_queue=queue, store=open_store(url, environ={}))
            transcript = await reader.attach(run.id).transcript()
        assert [m["content"] for m in transcript] == [
            "A recent question.",
            [{"type": "text", "text": "A recent answer."}],
        ]

        # The run closed before this retention, so it counts no more: no run is listed at all, as when gc asks the
        # wrong server or namespace, and gc removes nothing until told that is right.
        refused = gc_cli(client, url, {}, "--retention", "0s")
        assert (refused.returncode, refused.stderr, refused.stdout) == (
            1,
            f"error: Temporal lists no runs in namespace 'default' at {client.service_client.config.target_host}, "
            f"so gc would remove all {len(blobs)} blobs and {len(heads)} chain nodes written before the retention: "
            "check that TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE name the server and namespace the workers use, or "
            "pass --no-runs-ok if no run needs this content.\n",
            "",
        )
        assert rows(url) == (blobs, heads)
        gone = gc_cli(client, url, {}, "--retention", "0s", "--no-runs-ok")
        assert (gone.returncode, gone.stderr, gone.stdout) == (
            0,
            "",
            f"removed {len(blobs)} blobs ({sum(blobs.values())} bytes) and {len(heads)} chain nodes; kept 0 blobs and "
            "0 chain nodes referenced by 0 runs, and what was written within the retention\n",
        )
        assert rows(url) == ({}, set())


async def test_a_run_that_continued_as_new_keeps_its_whole_transcript_through_gc(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, tmp_path: Path, left_open: list[str]
) -> None:
    """Only the current execution counts (its predecessors closed before a 0s retention): what it carried is enough."""
    url = f"sqlite://{tmp_path}/store.db"
    client = temporal_env.client
    queue = f"gc-{uuid.uuid4()}"
    fake_api.script(*(end_turn(f"Answer {n}.") for n in range(1, 6)))
    store = open_store(url, environ={})
    async with store:
        async with worker_with_store(client, fake_api, queue, store):
            runner = AgentRunner(client, task_queue=queue, store=store)
            run = await runner.start(
                model="claude-fake-1",
                max_tokens=64,
                messages=[{"role": "user", "content": "Question 1."}],
                step=True,
                continue_as_new={"events": 10},
            )
            left_open.append(run.id)
            for turn in range(1, 4):
                await wait_status(run, "waiting_for_step", turn)
                await run.inject(f"Question {turn + 1}.", wait=False)
                await run.advance()
            await wait_status(run, "waiting_for_step", 4)
            assert (await run.status()).continuations >= 1
        blobs, heads = rows(url)
        age(url, 2 * 3600)
        runs = await open_runs(client)

        done = gc_cli(client, url, {}, "--retention", "0s")
        assert (done.returncode, done.stderr, done.stdout) == (
            0,
            "",
            f"removed 0 blobs (0 bytes) and 0 chain nodes; kept {len(blobs)} blobs and {len(heads)} chain nodes "
            f"referenced by {runs} runs, and what was written within the retention\n",
        )
        async with worker_with_store(client, fake_api, queue, store):
            run = AgentRunner(client, task_queue=queue, store=store).attach(run.id)
            await run.inject("Question 5.", wait=False)
            await run.advance()
            await wait_status(run, "waiting_for_step", 5)
            await run.advance()
            await run.until_done()
            transcript = await AgentRunner(client, task_queue=queue, store=store).attach(run.id).transcript()
    assert [m["content"] for m in transcript] == [
        "Question 1.",
        *(
            part
            for n in range(1, 5)
            for part in (
                [{"type": "text", "text": f"Answer {n}."}],
                [{"type": "text", "text": f"Question {n + 1}."}],
            )
        ),
        [{"type": "text", "text": "Answer 5."}],
    ]


PAGES = 40


@beta_async_tool
async def page(n: int) -> str:
    """Read a page.

    Args:
        n: Its number.
    """
    return f"Page {n}: " + "words " * 200  # over 256 bytes: stored apart, its tool result message names it


@beta_async_tool
async def finish() -> str:
    """Say the reading is done."""
    return "Done."


@pytest.mark.slow
async def test_a_long_runs_oldest_content_is_kept_though_only_stored_messages_name_it(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, tmp_path: Path, left_open: list[str]
) -> None:
    """Past the 64 messages a continuation carries, a run's open execution names its oldest messages by the
    transcript's head only, and their tool results only inside those messages: gc reads them to keep the results."""
    url = f"sqlite://{tmp_path}/store.db"
    client = temporal_env.client
    queue = f"gc-{uuid.uuid4()}"
    replies = [Reply([tool_use(f"toolu_{n}", "page", {"n": n})], "tool_use") for n in range(PAGES)]
    fake_api.script(*replies, Reply([tool_use("toolu_end", "finish", {})], "tool_use"))
    async with open_store(url, environ={}) as store:
        async with worker_with_store(client, fake_api, queue, store, page, finish):
            run = await AgentRunner(client, task_queue=queue, store=store).start(
                model="claude-fake-1",
                max_tokens=64,
                messages=[{"role": "user", "content": "Read every page."}],
                tools=[page, finish],
                continue_as_new={"events": 100},
                approval={"tools": ["finish"]},  # the last call waits: the run stays open
            )
            left_open.append(run.id)
            await wait_status(run, "waiting_for_approval", PAGES + 1)
            assert (await run.status()).continuations >= 3
        blobs, heads = rows(url)
        age(url, 2 * 3600)
        runs = await open_runs(client)

        done = gc_cli(
            client, url, {}, "--retention", "0s"
        )  # the earlier executions closed before it: they count no more
        assert (done.returncode, done.stderr, done.stdout) == (
            0,
            "",
            f"removed 0 blobs (0 bytes) and 0 chain nodes; kept {len(blobs)} blobs and {len(heads)} chain nodes "
            f"referenced by {runs} runs, and what was written within the retention\n",
        )
        async with worker_with_store(
            client, fake_api, queue, store, page, finish
        ):  # a fresh cache: read from the store
            transcript = await AgentRunner(client, task_queue=queue, store=store).attach(run.id).transcript()
            await run.handle.terminate("done")
    results = [m["content"][0]["content"] for m in transcript if m["role"] == "user" and isinstance(m["content"], list)]
    assert results == [f"Page {n}: " + "words " * 200 for n in range(PAGES)]


# ------------------------------------------------------------------------------------------- the sweep itself


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path}/store.db"
    elif request.param == "memory":
        yield "memory:"
    else:
        yield from fresh_database(request.getfixturevalue("postgres_url"), "gc")


async def test_putting_content_again_keeps_it_from_a_sweep_that_started_before(url: str) -> None:
    """Content is shared: a run storing what an expired run stored renews it, so the sweep leaves it."""
    shared, lone = b'"shared"', b'"lone"'
    node = ChainNode(ref_for(b"head"), None, ref_for(shared))
    async with open_store(url, environ={}) as store:
        await store.put({ref_for(shared): shared, ref_for(lone): lone})
        await store.put_nodes([node])
        await asyncio.sleep(0.01)
        cutoff = await store.clock()
        await asyncio.sleep(0.01)
        assert await store.put({ref_for(shared): shared}) == 0
        await store.put_nodes([node])
        dry = await store.sweep(set(), set(), written_before=cutoff, dry_run=True)
        swept = await store.sweep(set(), set(), written_before=cutoff)
        assert dry == swept == Swept(blobs=1, blob_bytes=len(lone), nodes=0)
        assert await store.get([ref_for(shared)]) == {ref_for(shared): shared}
        assert await store.chain(node.head) == [ref_for(shared)]
        stats = await store.stats()
    assert (stats.blobs, stats.nodes) == (1, 1)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_store_made_before_write_times_gets_them_and_its_rows_outlive_one_sweep(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Backward compatible: the columns are added; rows without a time are stamped by a sweep, not removed by it."""
    data = b'"from an older version"'
    schema = (
        "CREATE TABLE blobs (ref text PRIMARY KEY, data bytea NOT NULL)",
        "CREATE TABLE nodes (head text PRIMARY KEY, parent text, message text NOT NULL)",
    )
    rows_before = ("INSERT INTO blobs VALUES ({p}, {p})", "INSERT INTO nodes VALUES ('h', NULL, {p})")
    params = ((ref_for(data), data), (ref_for(data),))
    if kind == "sqlite":
        url = f"sqlite://{tmp_path}/old.db"
        with sqlite3.connect(tmp_path / "old.db") as conn:
            for statement in schema:
                conn.execute(statement.replace("bytea", "BLOB"))
            for statement, values in zip(rows_before, params, strict=True):
                conn.execute(statement.format(p="?"), values)
        await _sweep_twice(url, data)
        return
    for url in fresh_database(request.getfixturevalue("postgres_url"), "gc"):
        with psycopg.connect(url) as pg:
            for statement in schema:
                pg.execute(statement)
            for statement, values in zip(rows_before, params, strict=True):
                pg.execute(statement.format(p="%s"), values)
        await _sweep_twice(url, data)


async def _sweep_twice(url: str, data: bytes) -> None:
    async with open_store(url, environ={}) as store:
        assert await store.get([ref_for(data)]) == {ref_for(data): data}
        later = await store.clock() + 3600
        assert await store.sweep(set(), set(), written_before=later, dry_run=True) == Swept(0, 0, 0)
        assert await store.sweep(set(), set(), written_before=later) == Swept(0, 0, 0)
        assert await store.sweep(set(), set(), written_before=later) == Swept(1, len(data), 1)


async def test_a_retention_that_is_not_a_duration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_runner import cli

    assert await cli.amain(["store", "gc", "--retention", "30x"]) == 2
    assert capsys.readouterr().err.endswith(
        "agent-runner store gc: error: argument --retention: '30x' is not a duration: write e.g. 30d, 12h, 1h30m or "
        "0s\n"
    )


async def test_gc_without_a_temporal_address_fails_and_starts_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """gc never falls back to the embedded server: an empty new one lists no runs, and everything would go."""
    from agent_runner import cli

    url = f"sqlite://{tmp_path}/store.db"
    async with open_store(url, environ={}) as store:
        await store.put({ref_for(b'"kept"'): b'"kept"'})
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "no-temporal.toml"))
    monkeypatch.setenv("AGENT_RUNNER_STORE", url)
    monkeypatch.setattr(EmbeddedTemporal, "astart", None)  # starting one would fail the test with a TypeError

    assert await cli.amain(["store", "gc", "--retention", "0s", "--grace", "0s"]) == 1
    assert capsys.readouterr().err == (
        "error: No Temporal server is configured, and this command does not use the embedded one (it would know "
        "none of the runs): set TEMPORAL_ADDRESS (and TEMPORAL_NAMESPACE) to the server the workers use.\n"
    )
    assert rows(url) == ({ref_for(b'"kept"'): len(b'"kept"')}, set())


@pytest.mark.parametrize("namespace", ["no-such-namespace", ""], ids=["unknown", "empty"])
async def test_gc_in_a_namespace_temporal_does_not_have_says_so_in_one_line(
    namespace: str,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A wrong TEMPORAL_NAMESPACE is an error naming it and what to set, not an RPCError traceback."""
    from agent_runner import cli

    url = f"sqlite://{tmp_path}/store.db"
    monkeypatch.setenv("AGENT_RUNNER_STORE", url)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)

    assert await cli.amain(["store", "gc", "--retention", "0s", "--no-runs-ok"]) == 1
    assert capsys.readouterr().err == (
        f"error: Temporal at {temporal_address} has no namespace {namespace!r}: set TEMPORAL_NAMESPACE to the "
        "namespace the workers use (`temporal operator namespace list` lists them).\n"
    )
