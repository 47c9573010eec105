"""Throughput under load: N concurrent runs × I iterations with a slow model, the floor vs agent-runner.

Every run is I iterations of one model call and one tool call; the model takes ``--latency`` seconds to answer
(1 s by default), so most of a run is waiting, and what is measured is how many runs one worker keeps moving at once.
Everything runs on one embedded Temporal server (sqlite, WAL, tuned dispatch), on this machine:

* ``floor``: a bare workflow running 2·I activities in sequence, the first of each pair sleeping ``--latency``
  seconds (the model call), the second a no-op (the tool), on one plain ``Worker`` per process (Temporal's defaults
  but for ``max_concurrent_activities``, raised to the runs in flight, since a sleeping activity holds its slot).
* ``floor-stream``: the floor whose model activity makes the turn's request to the same fake through the SDK, with
  the worker's own client (``default_client``: aiohttp, no retries), and reads the reply as a stream, as agent-runner's
  model call does (its events as JSON): Temporal plus the one request a durable runner cannot skip, its HTTP
  included, measured under load (no payload, no store, no transcript).
* ``agent-runner/P``: ``agent-runner-worker --processes P --tools bench.load`` (the real command, a subprocess),
  running ``AgentRun`` against the fake Messages API (``agent_runner.testing``, in its own process), which answers
  every request with a ``tool_use`` after ``--latency`` seconds.
* ``agent-runner-backpressure/P``: the same with ``--backpressure``: new calls start only while the process keeps
  up (``agent_runner/backpressure.py``) instead of a fixed ``--max-concurrent-activities``.
* ``agent-runner-local/P``: ``agent-runner`` with ``--tools bench._load_local``: ``ping`` registered with
  ``tool_options(local=True)``, each call a local activity on the run's own worker.

Workers of each mode are started fresh, warmed up with one run, then the N runs are started at once. Columns: wall time
from the first start to the last result; iterations per second; that ÷ the floor's with the same process count (and ÷
``floor-stream``'s, when it is measured); workflow-task timeouts (``WorkflowTaskTimedOut`` events over every run's
history: a task that waited on a busy worker's sticky queue longer than its timeout, or took too long); the longest and
99th-percentile wait of a workflow task (scheduled → started); activity retries (attempts Temporal sent again: the sum
over every call of its ``ActivityTaskStarted`` event's ``attempt`` − 1, since a history records only a call's last
attempt, plus calls that timed out for good; the fake never fails a request here, so each is a call whose heartbeat or
start-to-close timeout passed on a busy worker: a model call billed twice); worker CPU seconds (all the worker's
processes, from ``/proc``) and the Temporal server's. The header gives the machine's load average before and after.

Usage::

    python bench/load.py [--runs 300] [--iterations 5] [--latency 1.0] [--processes 1,2] [--modes floor,agent-runner]
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import argparse
    import os
    import shutil
    import signal
    import statistics
    import subprocess
    import sys
    import tempfile
    import time
    import uuid
    from pathlib import Path

    import anthropic
    from anthropic import beta_async_tool
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle
    from temporalio.worker import Worker

    from agent_runner.activities.claude import default_client
    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter
    from agent_runner.temporal_server import EmbeddedTemporal, free_port
    from agent_runner.testing import FakeMessagesAPI, Reply, tool_use


def repository() -> Path:
    """The repository's root (a function: the sandbox re-imports this module to check the floor workflow)."""
    return Path(__file__).resolve().parent.parent


MODEL = "claude-bench-1"
USER_MESSAGE: dict[str, Any] = {"role": "user", "content": "Ping until you are told to stop."}


@beta_async_tool
async def ping(n: int) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
    """
    return f"pong {n}"


@activity.defn(name="bench_model_call")
async def model_call(latency: float) -> None:
    """Stands for the model call: waits as long as the model takes."""
    await asyncio.sleep(latency)


@functools.cache
def claude() -> anthropic.AsyncAnthropic:
    """The streaming floor's client, one per worker process (made at its first call, from the environment)."""
    return default_client()


@activity.defn(name="bench_streamed_model_call")
async def streamed_model_call(turn: int) -> None:
    """Stands for the model call, made as agent-runner's is: the turn's request through the SDK, read as a stream.

    A turn after the first carries the previous ``ping`` call and its result; the reply's events are read as JSON,
    without the SDK's per-event models, as agent-runner's model call reads them (``activities/reply_stream.py``).
    """
    messages: list[dict[str, Any]] = [USER_MESSAGE]
    if turn > 1:
        call = tool_use(f"toolu_{turn - 1}", ping.name, {"n": 1})
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "pong 1"}
        messages += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    async with claude().beta.messages.stream(
        model=MODEL, max_tokens=1024, messages=cast(Any, messages), tools=[ping.to_dict()]
    ) as stream:
        async for sse in anthropic.AsyncStream.raw_events(stream.response):
            if sse.event not in (None, "ping") and sse.data:
                sse.json()


@activity.defn(name="bench_tool_call")
async def tool_call() -> None:
    """Stands for the tool call, doing nothing."""


@workflow.defn(name="BenchLoadFloor")
class LoadFloor:
    """I iterations of a model call (a sleep) and a tool call (a no-op): the floor under an agent run."""

    @workflow.run
    async def run(self, iterations: int, latency: float, stream: bool = False) -> int:
        """Run ``iterations`` pairs of activities one after the other (the model call streamed from the fake)."""
        for turn in range(1, iterations + 1):
            if stream:
                await workflow.execute_activity(streamed_model_call, turn, start_to_close_timeout=timedelta(seconds=60))
            else:
                await workflow.execute_activity(model_call, latency, start_to_close_timeout=timedelta(seconds=60))
            await workflow.execute_activity(tool_call, start_to_close_timeout=timedelta(seconds=60))
        return iterations


# --------------------------------------------------------------------------------------------------------------
# Child processes: the fake Messages API and the floor's worker
# --------------------------------------------------------------------------------------------------------------


def serve_fake(port: int, latency: float) -> None:
    """The fake Messages API on ``port``: every request gets a ``tool_use`` of ``ping`` after ``latency`` s."""
    fake = FakeMessagesAPI(port).start()
    fake.responder = lambda _body: Reply(
        content=[tool_use(None, ping.name, {"n": 1})], stop_reason="tool_use", delay=latency
    )
    print("ready", flush=True)
    try:
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        os._exit(0)  # the fake keeps every request; leaving without tearing that down is faster


async def serve_floor(address: str, task_queue: str, slots: int) -> None:
    """One floor worker process until SIGTERM."""
    client = await Client.connect(address, data_converter=data_converter({}))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[LoadFloor],
        activities=[model_call, streamed_model_call, tool_call],
        max_concurrent_activities=slots,
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
    async with worker:
        await stop.wait()


# --------------------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One mode's results."""

    mode: str
    processes: int
    wall: float
    iterations_per_second: float
    timeouts: int
    activity_timeouts: int
    max_wait: float
    p99_wait: float
    cpu: float
    server_cpu: float


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its living descendants, from ``/proc``."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


async def task_waits(handle: WorkflowHandle[Any, Any]) -> tuple[int, int, list[float]]:
    """Workflow-task timeouts and activity retries in the run's history, and each workflow task's wait, seconds."""
    timeouts, activity_timeouts, waits = 0, 0, []
    scheduled: float | None = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled = event.event_time.ToDatetime().timestamp()
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and scheduled is not None:
            waits.append(event.event_time.ToDatetime().timestamp() - scheduled)
            scheduled = None
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            timeouts += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            # Only a call's last attempt is recorded: the ones before it were sent again.
            activity_timeouts += event.activity_task_started_event_attributes.attempt - 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            activity_timeouts += 1
    return timeouts, activity_timeouts, waits


async def run_mode(
    client: Client,
    mode: str,
    processes: int,
    args: argparse.Namespace,
    env: dict[str, str],
    address: str,
    server_pid: int,
) -> Row:
    """Start the mode's workers, warm up, run N runs at once, collect the numbers, stop the workers."""
    task_queue = f"load-{mode}-{processes}-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen[bytes]] = []
    if mode in ("floor", "floor-stream"):
        for _ in range(processes):
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--serve-floor", address, task_queue, str(args.runs)], env=env
                )
            )
    else:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(repository() / "worker.py"),
                    "--tools",
                    "bench._load_local" if mode == "agent-runner-local" else "bench.load",
                    "--task-queue",
                    task_queue,
                    "--processes",
                    str(processes),
                    *(["--backpressure"] if mode == "agent-runner-backpressure" else []),
                    *args.worker_args,
                ],
                env=env,
                stderr=subprocess.DEVNULL if not args.verbose else None,
            )
        )
    runner = AgentRunner(client, task_queue=task_queue)

    async def start(index: int) -> WorkflowHandle[Any, Any]:
        if mode in ("floor", "floor-stream"):
            return await client.start_workflow(
                LoadFloor.run,
                args=[args.iterations, args.latency, mode == "floor-stream"],
                id=f"{task_queue}-{index}",
                task_queue=task_queue,
            )
        run = await runner.start(
            model=MODEL,
            max_tokens=1024,
            messages=[USER_MESSAGE],
            tools=[ping],
            max_iterations=args.iterations,
            id=f"{task_queue}-{index}",
        )
        return run.handle

    try:
        # Warm-up: every worker process polling, code loaded. A worker that failed to start shows here, not as a hang.
        await asyncio.wait_for((await start(-1)).result(), timeout=120)
        await asyncio.sleep(2)  # the other processes of the mode finish starting
        cpu_before = sum(tree_cpu_seconds(p.pid) for p in procs)
        server_before = tree_cpu_seconds(server_pid)
        started = time.perf_counter()
        handles = await asyncio.gather(*(start(i) for i in range(args.runs)))
        await asyncio.gather(*(h.result() for h in handles))
        wall = time.perf_counter() - started
        cpu = sum(tree_cpu_seconds(p.pid) for p in procs) - cpu_before
        server_cpu = tree_cpu_seconds(server_pid) - server_before
        limit = asyncio.Semaphore(20)

        async def waits_of(handle: WorkflowHandle[Any, Any]) -> tuple[int, int, list[float]]:
            async with limit:
                return await task_waits(handle)

        results = await asyncio.gather(*(waits_of(h) for h in handles))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    waits = sorted(w for _, _, ws in results for w in ws)
    return Row(
        mode=mode,
        processes=processes,
        wall=wall,
        iterations_per_second=args.runs * args.iterations / wall,
        timeouts=sum(t for t, _, _ in results),
        activity_timeouts=sum(a for _, a, _ in results),
        max_wait=waits[-1] if waits else 0.0,
        p99_wait=statistics.quantiles(waits, n=100)[98] if len(waits) >= 2 else 0.0,
        cpu=cpu,
        server_cpu=server_cpu,
    )


async def measure(args: argparse.Namespace) -> None:
    """The server and the fake, then every mode at every process count, then the table."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-load-"))
    server = EmbeddedTemporal(state / "temporal.db")
    port = free_port()
    fake = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake", str(port), str(args.latency)], stdout=subprocess.PIPE
    )
    rows: list[Row] = []
    load_before = os.getloadavg()
    try:
        assert fake.stdout is not None
        fake.stdout.readline()
        await server.astart()
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": server.address,
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
            "ANTHROPIC_API_KEY": "bench",
            "AGENT_RUNNER_STORE": f"sqlite:///{state}/store.db",
            "PYTHONPATH": str(repository()),
        }
        client = await Client.connect(server.address, data_converter=data_converter({}))
        for processes in args.processes:
            for mode in args.modes:
                assert server.pid is not None
                row = await run_mode(client, mode, processes, args, env, server.address, server.pid)
                rows.append(row)
                print(f"  {mode}/{processes}: {row.wall:.1f} s", file=sys.stderr, flush=True)
    finally:
        fake.send_signal(signal.SIGTERM)
        fake.wait()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)
    report(rows, args, (load_before, os.getloadavg()))


def report(
    rows: list[Row], args: argparse.Namespace, load: tuple[tuple[float, float, float], tuple[float, float, float]]
) -> None:
    """The markdown table."""
    floor = {r.processes: r.iterations_per_second for r in rows if r.mode == "floor"}
    streamed = {r.processes: r.iterations_per_second for r in rows if r.mode == "floor-stream"}
    print(
        f"cores={os.cpu_count()} runs={args.runs} iterations/run={args.iterations} model latency={args.latency} s "
        f"worker flags: {' '.join(args.worker_args) or '(defaults)'}; "
        f"load average (1, 5, 15 min) before {' '.join(f'{x:.1f}' for x in load[0])}, "
        f"after {' '.join(f'{x:.1f}' for x in load[1])}"
    )
    print()
    print(
        "| mode | processes | wall s | iterations/s | ÷ floor | "
        + ("÷ floor-stream | " if streamed else "")
        + "WFT timeouts | activity retries | max WFT wait s | p99 WFT wait s | worker CPU s | server CPU s |"
    )
    print("|---|---:|---:|---:|---:|" + ("---:|" if streamed else "") + "---:|---:|---:|---:|---:|---:|")

    def ratio(value: float, base: float | None) -> str:
        return f"{value / base:.2f}" if base else "–"

    for r in rows:
        print(
            f"| {r.mode} | {r.processes} | {r.wall:.1f} | {r.iterations_per_second:.1f} | "
            f"{ratio(r.iterations_per_second, floor.get(r.processes))} | "
            + (f"{ratio(r.iterations_per_second, streamed.get(r.processes))} | " if streamed else "")
            + f"{r.timeouts} | {r.activity_timeouts} | "
            f"{r.max_wait:.2f} | {r.p99_wait:.2f} | {r.cpu:.1f} | {r.server_cpu:.1f} |"
        )


def main(argv: list[str] | None = None) -> int:
    """The benchmark's command line (and its child processes')."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-fake"]:
        serve_fake(int(argv[1]), float(argv[2]))
        return 0
    if argv[:1] == ["--serve-floor"]:
        asyncio.run(serve_floor(argv[1], argv[2], int(argv[3])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=300, help="concurrent runs (default 300)")
    parser.add_argument("--iterations", type=int, default=5, help="iterations per run (default 5)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency, seconds (default 1)")
    parser.add_argument("--processes", default="1,2", help="worker process counts to measure (default 1,2)")
    parser.add_argument(
        "--modes",
        default="floor,agent-runner",
        help="modes: floor, floor-stream, agent-runner, agent-runner-backpressure, agent-runner-local "
        "(default floor,agent-runner)",
    )
    parser.add_argument(
        "--worker-arg",
        dest="worker_args",
        action="append",
        default=[],
        help="an extra agent-runner-worker flag, e.g. --worker-arg=--sticky-queue-timeout=20 (repeatable)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the workers' logs")
    args = parser.parse_args(argv)
    args.processes = [int(p) for p in args.processes.split(",")]
    args.modes = [m.strip() for m in args.modes.split(",")]
    asyncio.run(measure(args))
    sys.stdout.flush()
    time.sleep(0.5)  # temporalio's native threads can crash a finalizing interpreter (sdk-python#300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
