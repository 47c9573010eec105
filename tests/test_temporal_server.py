"""Tests for agent_runner.temporal_server: a real `temporal server start-dev` per test."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent_runner.temporal_server import (
    EmbeddedKeeper,
    EmbeddedTemporal,
    TemporalDatabaseInUse,
    TemporalServerError,
    configured_address,
    connect_client,
    default_db_path,
    find_temporal_binary,
    free_port,
    keep_embedded_server,
)

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


@activity.defn
async def shout(text: str) -> str:
    return text.upper() + "!"


@workflow.defn
class ShoutWorkflow:
    def __init__(self) -> None:
        self._suffix: str | None = None

    @workflow.run
    async def run(self, text: str, wait_for_signal: bool) -> str:
        shouted = await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))
        if wait_for_signal:
            await workflow.wait_condition(lambda: self._suffix is not None)
        return shouted + (self._suffix or "")

    @workflow.signal
    def finish(self, suffix: str) -> None:
        self._suffix = suffix


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TEMPORAL_* from the host, no ~/.config/temporalio, state under tmp_path."""
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "no-such-temporal.toml"))
    monkeypatch.setenv("AGENT_RUNNER_HOME", str(tmp_path / "home"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedTemporal]:
    with EmbeddedTemporal(tmp_path / "temporal.db") as srv:
        yield srv


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


async def _run_worker_until(client: Client, task_queue: str, coro_factory: Callable[[], Awaitable[T]]) -> T:
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ShoutWorkflow],
        activities=[shout],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        return await coro_factory()


def test_find_temporal_binary() -> None:
    path = find_temporal_binary()
    assert Path(path).name == "temporal"
    assert os.access(path, os.X_OK)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert "temporal version" in out


def test_command_line(tmp_path: Path) -> None:
    srv = EmbeddedTemporal(
        tmp_path / "x.db",
        17999,
        namespace="agents",
        search_attributes={"AgentName": "Keyword", "Turns": "Int"},
        extra_args=["--log-format", "json"],
    )
    cmd = srv.command()
    joined = " ".join(cmd)
    assert cmd[1:3] == ["server", "start-dev"]
    assert "--headless" in cmd and "--ui-port" not in cmd
    assert "--ip 127.0.0.1 --port 17999" in joined
    assert f"--db-filename {tmp_path / 'x.db'}" in joined
    assert "--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal" in joined
    for processor in ("transfer", "timer", "visibility"):
        assert f"--dynamic-config-value history.{processor}ProcessorMaxPollRPS=200" in joined
    assert "--namespace agents" in joined
    assert "--search-attribute AgentName=Keyword" in joined
    assert "--search-attribute Turns=Int" in joined
    assert cmd[-2:] == ["--log-format", "json"]
    assert srv.address == "127.0.0.1:17999"
    assert srv.log_file == tmp_path / "x.db.log"
    assert srv.pid is None and not srv.running

    with_ui = EmbeddedTemporal(tmp_path / "y.db", ui=True, ui_port=18999)
    assert "--headless" not in with_ui.command()
    assert "--ui-port 18999" in " ".join(with_ui.command())
    assert with_ui.ui_url == "http://127.0.0.1:18999"


def test_default_db_path_uses_agent_runner_home(tmp_path: Path) -> None:
    assert default_db_path() == tmp_path / "home" / "temporal.db"
    assert EmbeddedTemporal().db_filename == tmp_path / "home" / "temporal.db"


@pytest.mark.slow
@pytest.mark.asyncio
async def test_workflow_survives_server_kill(tmp_path: Path) -> None:
    db = tmp_path / "state" / "temporal.db"
    srv = EmbeddedTemporal(db, search_attributes={"AgentName": "Keyword"})
    await srv.astart()
    try:
        assert srv.running and srv.pid is not None
        client = await Client.connect(srv.address)
        task_queue = f"tq-{uuid.uuid4()}"
        done_id, pending_id = f"done-{uuid.uuid4()}", f"pending-{uuid.uuid4()}"

        async def run_both() -> str:
            result = await client.execute_workflow(
                ShoutWorkflow.run, args=["hello", False], id=done_id, task_queue=task_queue
            )
            pending = await client.start_workflow(
                ShoutWorkflow.run, args=["later", True], id=pending_id, task_queue=task_queue
            )
            # Let the activity complete so the workflow is parked on the signal.
            while True:
                events = [e async for e in pending.fetch_history_events()]
                if any(e.HasField("activity_task_completed_event_attributes") for e in events):
                    return result
                await asyncio.sleep(0.05)

        assert await _run_worker_until(client, task_queue, run_both) == "HELLO!"

        # Crash: SIGKILL, no graceful shutdown. Restart the same object (same port).
        port = srv.port
        srv.kill()
        srv.kill()  # idempotent
        assert not srv.running and srv.pid is None
        assert not _listening(port)
        srv.start()
        assert srv.port == port

        client = await Client.connect(srv.address)
        assert await client.get_workflow_handle(done_id).result() == "HELLO!"

        # Crash again, then bring it back with a fresh object on the same file and port.
        srv.kill()
        srv = EmbeddedTemporal(db, port)
        await srv.astart()
        client = await Client.connect(srv.address)
        assert await client.get_workflow_handle(done_id).result() == "HELLO!"

        async def finish_pending() -> str:
            handle = client.get_workflow_handle(pending_id)
            await handle.signal(ShoutWorkflow.finish, " (after crash)")
            result: str = await handle.result()
            return result

        assert await _run_worker_until(client, task_queue, finish_pending) == "LATER! (after crash)"
    finally:
        await srv.astop()
    await srv.astop()  # idempotent
    assert not srv.running


def test_startup_failure_reports_log_tail(tmp_path: Path) -> None:
    srv = EmbeddedTemporal(tmp_path / "t.db", extra_args=["--no-such-flag"])
    with pytest.raises(TemporalServerError, match="no-such-flag") as info:
        srv.start(timeout=10)
    assert "last lines" in str(info.value)
    assert not srv.running
    # The failed attempt released the database lock.
    with EmbeddedTemporal(tmp_path / "t.db") as ok:
        assert ok.running


def test_a_free_port_is_kept_from_automatic_choices_but_not_from_a_server_binding_it() -> None:
    port = free_port()
    # Its TIME_WAIT connection refuses a bind without SO_REUSEADDR, as the kernel's own choices (bind to port 0,
    # an outgoing connection's port) skip it: another process cannot take it before its owner binds it.
    with socket.socket() as plain, pytest.raises(OSError) as taken:
        plain.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    with socket.socket() as server:  # servers (Go, asyncio, Rust, postgres) set SO_REUSEADDR
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()


class _OnWarning(logging.Handler):
    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self.action, self.messages = action, list[str]()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.action()


def _errors_logged(message: str) -> str:
    return message.partition("errors it logged:\n")[2].partition("\nlast lines:")[0]


@pytest.mark.parametrize("freed", [True, False], ids=["freed-after-the-first-attempt", "kept-taken"])
def test_a_server_that_lost_a_port_at_start_starts_again_and_says_why_when_it_cannot(
    tmp_path: Path, freed: bool
) -> None:
    """A port the server chose for itself and found taken (here its HTTP API's) is worth another start, twice."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    warned = _OnWarning(holder.close if freed else lambda: None)
    logging.getLogger("agent_runner.temporal_server").addHandler(warned)
    srv = EmbeddedTemporal(tmp_path / "t.db", extra_args=["--http-port", str(busy)])
    try:
        if freed:
            srv.start()
            assert srv.running
            assert warned.messages == ["Temporal dev server lost a port race at start (attempt 1); starting it again"]
            return
        with pytest.raises(TemporalServerError) as info:
            srv.start()
        message = str(info.value)
        assert message.startswith("Temporal dev server exited with code 1 during startup")
        assert _errors_logged(message) == (
            f"Error: can't set frontend HTTP port {busy}: listen tcp 127.0.0.1:{busy}: bind: address already in use"
        )
        assert warned.messages == [
            f"Temporal dev server lost a port race at start (attempt {n}); starting it again" for n in (1, 2)
        ]
        assert not srv.running
        with EmbeddedTemporal(tmp_path / "t.db") as ok:  # the failed attempts released the database lock
            assert ok.running
    finally:
        logging.getLogger("agent_runner.temporal_server").removeHandler(warned)
        srv.stop()
        holder.close()


def test_database_lock_and_port_conflicts(server: EmbeddedTemporal, tmp_path: Path) -> None:
    with pytest.raises(TemporalDatabaseInUse) as info:
        EmbeddedTemporal(server.db_filename).start()
    assert info.value.holder_address == server.address

    with pytest.raises(TemporalServerError, match="already in use"):
        EmbeddedTemporal(tmp_path / "other.db", server.port).start()
    assert server.running


def test_stop_is_graceful_and_idempotent(tmp_path: Path) -> None:
    srv = EmbeddedTemporal(tmp_path / "t.db")
    srv.stop()  # never started: no-op
    srv.start()
    proc_pid = srv.pid
    assert proc_pid is not None
    srv.stop()
    srv.stop()
    assert not srv.running and not _listening(srv.port)
    with pytest.raises(ProcessLookupError):
        os.kill(proc_pid, 0)


def test_configured_address(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert configured_address() is None

    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
    assert configured_address() == "temporal.example:7233"
    monkeypatch.setenv("TEMPORAL_ADDRESS", "")
    assert configured_address() is None
    monkeypatch.delenv("TEMPORAL_ADDRESS")

    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.default]\naddress = "from-file:7233"\n\n'
        '[profile.cloud]\naddress = "ns.tmprl.cloud:7233"\nnamespace = "ns"\n'
    )
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    assert configured_address() == "from-file:7233"
    monkeypatch.setenv("TEMPORAL_PROFILE", "cloud")
    assert configured_address() == "ns.tmprl.cloud:7233"
    monkeypatch.setenv("TEMPORAL_ADDRESS", "override:1")
    assert configured_address() == "override:1"

    # An explicit environment mapping replaces os.environ entirely.
    assert configured_address({"TEMPORAL_CONFIG_FILE": str(tmp_path / "missing.toml")}) is None
    assert configured_address({"TEMPORAL_ADDRESS": "x:1"}) == "x:1"


@pytest.mark.asyncio
async def test_connect_client_uses_temporal_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with EmbeddedTemporal(tmp_path / "t.db") as server:
        monkeypatch.setenv("TEMPORAL_ADDRESS", server.address)
        client, started = await connect_client()
        assert started is None
        assert client.namespace == "default"
        assert await client.service_client.check_health()

        client, started = await connect_client(namespace="elsewhere")
        assert started is None and client.namespace == "elsewhere"
    assert not server.running


@pytest.mark.asyncio
async def test_connect_client_starts_then_reuses_embedded_server(tmp_path: Path) -> None:
    port = EmbeddedTemporal(tmp_path / "unused.db").port  # a free port
    client, started = await connect_client(embedded_db=tmp_path / "t.db", embedded_port=port)
    assert started is not None
    try:
        assert started.address == f"127.0.0.1:{port}"
        assert started.db_filename == tmp_path / "t.db"
        assert await client.service_client.check_health()

        # A second caller (e.g. a CLI next to a worker) reuses the running server.
        client2, started2 = await connect_client(embedded_db=tmp_path / "t.db", embedded_port=port)
        assert started2 is None
        assert await client2.service_client.check_health()
    finally:
        await started.astop()
    assert not _listening(port)


async def test_a_worker_on_the_embedded_server_starts_it_again_when_the_process_that_started_it_stops(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    port = EmbeddedTemporal(tmp_path / "unused.db").port  # a free port
    # The first worker started the server; a second worker reuses it, keeping it up while it runs.
    _, started = await connect_client(embedded_db=db, embedded_port=port)
    assert started is not None
    client, reused = await connect_client(embedded_db=db, embedded_port=port)
    assert reused is None
    keeper = EmbeddedKeeper(reused, port=port, db_filename=db, interval=0.2)
    task_queue = f"tq-{uuid.uuid4()}"

    async def across_the_stop() -> None:
        handle = await client.start_workflow(
            ShoutWorkflow.run, args=["before", True], id=f"waiting-{uuid.uuid4()}", task_queue=task_queue
        )
        while not any(
            [e.HasField("activity_task_completed_event_attributes") async for e in handle.fetch_history_events()]
        ):
            await asyncio.sleep(0.05)

        await started.astop()  # the first worker exits, stopping the server it started
        for _ in range(300):
            if keeper.server is not None and _listening(port):
                break
            await asyncio.sleep(0.1)
        assert keeper.server is not None and keeper.server.running
        assert (keeper.server.port, keeper.server.db_filename) == (port, db)

        # The run begun before goes on, and a new one runs, through the worker's own client.
        await handle.signal(ShoutWorkflow.finish, " (after)")
        assert await handle.result() == "BEFORE! (after)"
        assert (
            await client.execute_workflow(
                ShoutWorkflow.run, args=["new", False], id=f"new-{uuid.uuid4()}", task_queue=task_queue
            )
            == "NEW!"
        )

    try:
        async with keep_embedded_server(keeper):
            await _run_worker_until(client, task_queue, across_the_stop)
    finally:
        await started.astop()  # idempotent: only a failure before the stop above leaves it running
    # Leaving, the keeper stops the server it started (another worker's keeper would take over).
    assert keeper.server is not None and not keeper.server.running
    assert not _listening(port)


async def test_a_worker_whose_embedded_server_dies_starts_it_again(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    port = EmbeddedTemporal(tmp_path / "unused.db").port  # a free port
    client, started = await connect_client(embedded_db=db, embedded_port=port)
    assert started is not None and started.pid is not None
    keeper = EmbeddedKeeper(started, port=port, db_filename=db, interval=0.2)
    task_queue = f"tq-{uuid.uuid4()}"
    async with keep_embedded_server(keeper):
        crashed = started.pid
        os.kill(crashed, signal.SIGKILL)  # the server this worker started dies; the worker lives on
        for _ in range(300):
            if keeper.server is not started and _listening(port):
                break
            await asyncio.sleep(0.1)
        assert keeper.server is not started and keeper.server is not None
        assert keeper.server.pid != crashed and (keeper.server.port, keeper.server.db_filename) == (port, db)
        assert (
            await _run_worker_until(
                client,
                task_queue,
                lambda: client.execute_workflow(
                    ShoutWorkflow.run, args=["again", False], id=f"again-{uuid.uuid4()}", task_queue=task_queue
                ),
            )
            == "AGAIN!"
        )
    assert not _listening(port)


def test_a_worker_on_a_configured_server_keeps_none() -> None:
    async def body() -> None:
        async with keep_embedded_server(None) as keeper:
            assert keeper is None

    asyncio.run(body())


@pytest.mark.asyncio
async def test_connect_client_refuses_foreign_listener(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        port = sock.getsockname()[1]

        async def accept_and_close() -> None:
            # Behave like a non-gRPC service: accept, send garbage, hang up.
            loop = asyncio.get_running_loop()
            while True:
                conn, _ = await loop.sock_accept(sock)
                with conn:
                    await loop.sock_sendall(conn, b"HTTP/1.1 400 Bad Request\r\n\r\n")

        acceptor = asyncio.create_task(accept_and_close())
        try:
            with pytest.raises(TemporalServerError, match="not a Temporal server"):
                await connect_client(embedded_db=tmp_path / "t.db", embedded_port=port)
        finally:
            acceptor.cancel()


def test_cli_runs_until_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.temporal_server", "--db", str(db), "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no READY line within 30 s"
        line = proc.stdout.readline().strip()
        assert line.startswith("READY 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        assert _listening(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert not _listening(port)
        assert db.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
