"""Where an ``AgentRun`` iteration's time and CPU go, beside the Temporal floor: experiments, counts and a profile.

The workload is ``bench/peer.py``'s: N model calls (N-1 ``ping`` tool calls of ``--size`` bytes) per run against the
fake Messages API, on an embedded Temporal dev server with in-process workers. The script measures, per iteration
(median wall over K runs; CPU of this process minus the fake API's thread, summed over the K runs):

1. **Variants** that take one suspect away without changing runtime code (each its own worker and task queue):

   * ``agent-runner``: as deployed (``build_worker``: ``AgentRun`` outside the sandbox, SQLite store on disk,
     ``synchronous=FULL``);
   * ``sandboxed``: the same plugin with ``AgentRun`` in Temporal's sandbox, the runner's modules passed through (as
     deployed before: what the sandbox costs);
   * ``store-in-memory``: the store file on ``/dev/shm`` (what the disk syncs of store commits cost);
   * ``no-live-events``: the model call publishes no live events (``EventPublisher`` swapped, on that variant's
     task queue only, for one that sends nothing): no signals to the run;
   * ``no-heartbeats``: ``activity.heartbeat()`` does nothing on that variant's task queue;
   * ``floor``: 2·N no-op activities.

2. **Counts** of the ``agent-runner`` variant, per iteration: history events by type, ``activity.heartbeat()`` calls
   (counted by wrapping it in this process), store transactions and the time they took (``ContentStore``'s
   one-thread executor, wrapped).

3. **Profile** (``--spy``, needs ``py-spy`` from the ``bench`` extra): the script runs itself under
   ``py-spy record --threads --gil`` (samples where a Python thread holds the GIL: Python CPU), only the
   ``agent-runner`` variant, and prints the share of samples per thread and in each suspect's code, and the hottest
   functions (self and total).

Usage::

    python bench/hotspots.py [--iterations N] [--runs K] [--size 1KB|10KB|100KB] [--spy]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    # bench/ is this script's directory: the workload, the tool and the floor are bench/peer.py's.
    from peer import (
        MAX_TOKENS,
        MODEL,
        PROMPT,
        SIZES,
        FloorWorkflow,
        fake_thread_clock,
        noop,
        ping,
        pinger,
    )
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowHandle
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    import agent_runner.activities.claude as claude_activity
    from agent_runner.activities.claude import ClaudeActivities, default_client
    from agent_runner.activities.live_events import EventPublisher
    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter
    from agent_runner.plugin import AgentRunnerPlugin
    from agent_runner.store import ContentStore, open_store
    from agent_runner.temporal_server import EmbeddedTemporal
    from agent_runner.testing import FakeMessagesAPI
    from agent_runner.worker import build_registry, build_worker

VARIANTS = ("agent-runner", "sandboxed", "store-in-memory", "no-live-events", "no-heartbeats", "floor")
# The variants that take away a piece of the model call do it on their own task queue only (see Counters).
NO_LIVE_EVENTS_QUEUE = "profile-no-live-events"
NO_HEARTBEATS_QUEUE = "profile-no-heartbeats"

# Where a sample's stack says the time went: (label, substrings of a frame, any of which puts the sample there).
SUSPECTS: list[tuple[str, tuple[str, ...]]] = [
    ("workflow activations, all (sandboxed AgentRun, payload visits)", ("_WorkflowWorker._handle_activation",)),
    ("- sandbox: a run's instance made (workflow modules re-imported)", ("SandboxedWorkflowRunner.create_instance",)),
    ("- sandbox: serialization context fetched for each payload", ("get_serialization_context",)),
    (
        "- AgentRun's own code",
        (
            "workflows/agent_run.py",
            "workflows/model_calls.py",
            "workflows/boundary.py",
            "workflows/compaction.py",
            "workflows/conversation.py",
            "agent_runner/contract/conversation.py",
            "agent_runner/contract/run_input.py",
        ),
    ),
    ("model call activity, all (ClaudeActivities)", ("ClaudeActivities.",)),
    ("- the SDK's request and SSE stream (over aiohttp)", ("AsyncAPIClient", "BetaAsyncMessageStream")),
    ("- live events (EventPublisher, workflow stream client)", ("live_events.py",)),
    ("- content layer and store (transcript append, offload)", ("agent_runner/content.py", "agent_runner/store.py")),
    ("live events, workflow side (workflow stream host)", ("contrib/workflow_streams/_stream.py",)),
    ("activity heartbeats (activity.heartbeat, heartbeat loop)", ("heartbeat",)),
    ("tool call activity (ToolActivities.run_tool)", ("ToolActivities.run_tool",)),
    ("Temporal activity plumbing (_ActivityWorker)", ("_ActivityWorker",)),
    ("the client: start, result", ("AgentRunner.start", "Run.result")),
    ("logging", ("logging/__init__.py",)),
]


# --------------------------------------------------------------------------------------------------------------
# Counting wrappers (instrumentation of this process only)
# --------------------------------------------------------------------------------------------------------------


class SilentPublisher:
    """``EventPublisher``'s interface, writing nothing: a model call without live events."""

    interval = 1.0

    async def __aenter__(self) -> SilentPublisher:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    def publish(self, *_args: Any, **_fields: Any) -> None:
        return None

    def delta(self, *_args: Any) -> None:
        return None

    def tick(self) -> None:
        return None

    async def take(self) -> tuple[str, list[bytes]]:
        return "", []


class Counters:
    """Heartbeats and store transactions since the last ``reset``."""

    def __init__(self) -> None:
        self.heartbeats = 0
        self.store_calls = 0
        self.store_seconds = 0.0
        heartbeat = activity.heartbeat

        def counted(*details: Any) -> None:
            self.heartbeats += 1
            if activity.info().task_queue != NO_HEARTBEATS_QUEUE:
                heartbeat(*details)

        activity.heartbeat = counted  # the activities call it as `activity.heartbeat()`

        def publisher(store: Any, run_id: str, **options: Any) -> Any:
            if activity.info().task_queue == NO_LIVE_EVENTS_QUEUE:
                return SilentPublisher()
            return EventPublisher(store, run_id, **options)

        claude_activity.EventPublisher = publisher  # type: ignore[attr-defined,assignment]  # the name claude.py calls

    def reset(self) -> None:
        self.heartbeats = self.store_calls = 0
        self.store_seconds = 0.0

    def install(self, store: ContentStore) -> None:
        """Time the store's transactions on its thread."""
        run = store._run  # type: ignore[attr-defined]  # the SQLite store's one way to its thread

        async def timed(work: Callable[..., Any]) -> Any:
            started = time.perf_counter()
            try:
                return await run(work)
            finally:
                self.store_calls += 1
                self.store_seconds += time.perf_counter() - started

        store._run = timed  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------------------------


async def run_variants(iterations: int, runs: int, size: int, variants: tuple[str, ...], spy: bool) -> None:
    """Run each variant ``1 + runs`` times round-robin; print the tables (or, under py-spy, just run)."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-bench-profile-"))
    shm = Path(tempfile.mkdtemp(prefix="agent-runner-bench-profile-", dir="/dev/shm"))
    server = EmbeddedTemporal(state / "temporal.db")
    fake = FakeMessagesAPI().start()
    stores = {"disk": open_store(f"sqlite:///{state / 'store.db'}"), "shm": open_store(f"sqlite:///{shm / 'store.db'}")}
    counters = Counters()
    for store in stores.values():
        counters.install(store)
    try:
        await server.astart()
        client = await Client.connect(server.address, data_converter=data_converter())

        def claude() -> ClaudeActivities:
            return ClaudeActivities(lambda: default_client(base_url=fake.url, api_key="bench"))  # the worker's client

        registry = build_registry(tools=[ping])
        quick = timedelta(seconds=1)
        workers = {
            "agent-runner": build_worker(
                client,
                registry=registry,
                task_queue="profile-agent-runner",
                claude=claude(),
                store=stores["disk"],
                graceful_shutdown_timeout=quick,
            ),
            "sandboxed": Worker(
                client,
                task_queue="profile-sandboxed",
                plugins=[AgentRunnerPlugin(registry=registry, claude=claude(), store=stores["disk"])],
                # AgentRun is `sandboxed=False`: the worker runs it with its "unsandboxed" runner, a sandbox here.
                unsandboxed_workflow_runner=SandboxedWorkflowRunner(
                    restrictions=SandboxRestrictions.default.with_passthrough_modules(
                        "agent_runner", "anthropic", "pydantic", "pydantic_core"
                    )
                ),
                graceful_shutdown_timeout=quick,
            ),
            "store-in-memory": build_worker(
                client,
                registry=registry,
                task_queue="profile-store-in-memory",
                claude=claude(),
                store=stores["shm"],
                graceful_shutdown_timeout=quick,
            ),
            "no-live-events": build_worker(
                client,
                registry=registry,
                task_queue=NO_LIVE_EVENTS_QUEUE,
                claude=claude(),
                store=stores["disk"],
                graceful_shutdown_timeout=quick,
            ),
            "no-heartbeats": build_worker(
                client,
                registry=registry,
                task_queue=NO_HEARTBEATS_QUEUE,
                claude=claude(),
                store=stores["disk"],
                graceful_shutdown_timeout=quick,
            ),
            "floor": Worker(
                client,
                task_queue="profile-floor",
                workflows=[FloorWorkflow],
                activities=[noop],
                graceful_shutdown_timeout=quick,
            ),
        }
        queues = {
            "agent-runner": "profile-agent-runner",
            "sandboxed": "profile-sandboxed",
            "store-in-memory": "profile-store-in-memory",
            "no-live-events": NO_LIVE_EVENTS_QUEUE,
            "no-heartbeats": NO_HEARTBEATS_QUEUE,
        }
        stores_of = dict.fromkeys(queues, "disk") | {"store-in-memory": "shm"}

        async def one(variant: str, iterations: int) -> WorkflowHandle[Any, Any]:
            if variant == "floor":
                handle = await client.start_workflow(
                    FloorWorkflow.run, 2 * iterations, id=f"profile-floor-{uuid.uuid4()}", task_queue="profile-floor"
                )
                await handle.result()
                return handle
            fake.reset()
            fake.responder = pinger(iterations, size)
            runner = AgentRunner(client, task_queue=queues[variant], store=stores[stores_of[variant]])
            run = await runner.start(
                model=MODEL,
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": PROMPT}],
                tools=[ping],
                max_iterations=iterations + 1,
                id=f"profile-{variant}-{uuid.uuid4()}",
            )
            result = await run.result()
            if result.iterations != iterations:
                raise RuntimeError(f"{variant}: expected {iterations} iterations, got {result!r}")
            return run.handle

        fake_cpu = fake_thread_clock()
        lengths = (iterations, 2 * iterations)
        seconds: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in lengths}
        cpu: dict[tuple[str, int], float] = dict.fromkeys(seconds, 0.0)
        counts: dict[str, collections.Counter[str]] = {v: collections.Counter() for v in variants}
        last: dict[str, WorkflowHandle[Any, Any]] = {}
        active = [workers[v] for v in variants]
        for worker in active:
            await worker.__aenter__()
        try:
            order = [(v, n) for v in variants for n in lengths]
            for round_ in range(runs + 1):  # round 0 warms up
                shift = round_ % len(order)
                for variant, n in order[shift:] + order[:shift]:
                    counters.reset()
                    cpu0, fake0 = time.process_time(), fake_cpu()
                    started = time.perf_counter()
                    handle = await one(variant, n)
                    elapsed = time.perf_counter() - started
                    if round_:
                        seconds[(variant, n)].append(elapsed)
                        cpu[(variant, n)] += (time.process_time() - cpu0) - (fake_cpu() - fake0)
                        if n == iterations:
                            last[variant] = handle
                            counts[variant].update(
                                {
                                    "heartbeats": counters.heartbeats,
                                    "store transactions": counters.store_calls,
                                    "store ms": round(counters.store_seconds * 1e6),  # µs, shown as ms
                                }
                            )
                if not spy:
                    print(f"  round {round_}/{runs} done", file=sys.stderr, flush=True)
                elif not round_:  # warmed up: let the profiler attach now, so start-up stays out of the profile
                    print("WARMED", flush=True)
                    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            histories = {v: await last[v].fetch_history() for v in variants}
        finally:
            for worker in reversed(active):
                await worker.__aexit__(None, None, None)
        if spy:
            return
        report(variants, iterations, runs, size, seconds, cpu, counts, histories)
    finally:
        fake.stop()
        for store in stores.values():
            await store.close()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


def report(
    variants: tuple[str, ...],
    iterations: int,
    runs: int,
    size: int,
    seconds: dict[tuple[str, int], list[float]],
    cpu: dict[tuple[str, int], float],
    counts: dict[str, collections.Counter[str]],
    histories: dict[str, Any],
) -> None:
    """Print the tables: per-iteration slopes and per-run constants, counts, history events by type."""
    n, n2 = iterations, 2 * iterations

    def wall(variant: str, length: int) -> float:
        return statistics.median(seconds[(variant, length)]) * 1000

    def work(variant: str, length: int) -> float:
        return cpu[(variant, length)] * 1000 / runs

    print(f"N={n} and 2N={n2} model calls per run ({size} B tool results), K={runs} runs each (+1 warm-up)")
    print("per iteration = (X(2N) - X(N)) / N; per run = X(N) - N·(per iteration): what a run costs once")
    print()
    print(
        "| variant | wall ms/iter | ÷ floor | wall ms/run | worker CPU ms/iter | ÷ floor | worker CPU ms/run "
        "| at 2N: wall ms/iter | ÷ floor | worker CPU ms/iter | ÷ floor |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    slopes = {}
    for variant in variants:
        w = (wall(variant, n2) - wall(variant, n)) / n
        c = (work(variant, n2) - work(variant, n)) / n
        slopes[variant] = (w, c)
    fw, fc = slopes.get("floor", (float("nan"), float("nan")))
    flat = {v: (wall(v, n2) / n2, work(v, n2) / n2) for v in variants}  # plain per-iteration figures at 2N
    gw, gc = flat.get("floor", (float("nan"), float("nan")))
    for variant in variants:
        w, c = slopes[variant]
        aw, ac = flat[variant]
        print(
            f"| {variant} | {w:.2f} | {w / fw:.2f}× | {wall(variant, n) - n * w:.0f} "
            f"| {c:.2f} | {c / fc:.2f}× | {work(variant, n) - n * c:.0f} "
            f"| {aw:.2f} | {aw / gw:.2f}× | {ac:.2f} | {ac / gc:.2f}× |"
        )
    print()
    print("Per iteration, runs of N (heartbeats: activity.heartbeat() calls; store: transactions and their wall ms):")
    print()
    for variant in variants:
        if variant != "floor":
            seen = counts[variant]
            print(
                f"  {variant}: heartbeats {seen['heartbeats'] / (runs * n):.1f}, "
                f"store transactions {seen['store transactions'] / (runs * n):.1f}, "
                f"store ms {seen['store ms'] / 1000 / (runs * n):.2f}"
            )
    print()
    print("History events per iteration, by type (last run of N):")
    print()
    print("| event type | " + " | ".join(histories) + " |")
    print("|---|" + "---:|" * len(histories))
    by_type = {v: collections.Counter(EventType.Name(e.event_type) for e in h.events) for v, h in histories.items()}
    first = next(iter(by_type.values()))
    for name in sorted(set().union(*by_type.values()), key=lambda k: -first.get(k, 0)):
        cells = " | ".join(f"{by_type[v].get(name, 0) / n:.1f}" for v in histories)
        print(f"| {name.removeprefix('EVENT_TYPE_')} | {cells} |")


# --------------------------------------------------------------------------------------------------------------
# py-spy
# --------------------------------------------------------------------------------------------------------------


def profile(iterations: int, runs: int, size_name: str) -> int:
    """Run the agent-runner variant under ``py-spy record``; print where the samples fall."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed here: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="agent-runner-bench-spy-")) / "raw.txt"
    workload = [
        sys.executable, __file__, "--iterations", str(iterations), "--runs", str(runs), "--size", size_name,
        "--variants", "agent-runner", "--under-spy",
    ]  # fmt: skip
    child = subprocess.Popen(workload, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    if child.stdout.readline().strip() != "WARMED":
        child.kill()
        print("the workload ended before its warm-up run did", file=sys.stderr)
        return 1
    record = [spy, "record", "--threads", "--gil", "--rate", "250", "--format", "raw", "--output", str(out)]
    recorder = subprocess.Popen([*record, "--pid", str(child.pid)], stdout=subprocess.DEVNULL)
    time.sleep(2)  # py-spy attaches
    child.stdin.write("GO\n")
    child.stdin.flush()
    child.wait()
    recorder.wait()
    stacks: list[tuple[list[str], int]] = []
    for line in out.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack:
            stacks.append((stack.split(";"), int(samples)))
    print("RAW", out)
    total = sum(c for _, c in stacks)
    print(
        f"py-spy: {total} samples at 250 Hz where a thread held the GIL, during {runs} runs each of N={iterations} "
        f"and 2N (after the warm-up runs)"
    )
    print()
    threads: collections.Counter[str] = collections.Counter()
    suspects: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    total_time: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        thread = frames[0]
        threads[thread_kind(thread, frames)] += count
        joined = ";".join(frames)
        for label, needles in SUSPECTS:
            if any(needle in joined for needle in needles):
                suspects[label] += count
        self_time[frames[-1]] += count
        for frame in set(frames[1:]):
            total_time[frame] += count
    print("| thread | share of samples |")
    print("|---|---:|")
    for name, count in threads.most_common():
        print(f"| {name} | {100 * count / total:.1f}% |")
    print()
    print("| suspect (a sample counts for every suspect whose code is on its stack) | share of samples |")
    print("|---|---:|")
    for label, _ in SUSPECTS:
        print(f"| {label} | {100 * suspects[label] / total:.1f}% |")
    print()
    print("Hottest functions, self (leaf) samples:")
    print()
    for frame, count in self_time.most_common(25):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print()
    print("Hottest functions, total (on the stack) samples:")
    print()
    for frame, count in total_time.most_common(40):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    return 0


def thread_kind(thread: str, frames: list[str]) -> str:
    """Name a sampled thread by what it runs."""
    joined = ";".join(frames)
    if "agent_runner/testing/" in joined:
        return "fake Messages API thread"
    if "agent-runner-store" in thread or "agent_runner/store.py" in joined and "_worker (concurrent" in joined:
        return "content store thread"
    if "workflow_sandbox" in joined or "_workflow_instance.py" in joined or "workflow/_" in joined:
        return "workflow activation threads"
    if "run_until_complete" in joined or "_run_once" in joined:
        return "main thread (asyncio loop: client, activities, worker)"
    return thread.split(" ")[0] + " (other)"


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20, metavar="N", help="model calls per run (default: 20)")
    parser.add_argument("--runs", type=int, default=5, metavar="K", help="measured runs per variant (default: 5)")
    parser.add_argument("--size", default="1KB", choices=list(SIZES), help="tool result size (default: 1KB)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--spy", action="store_true", help="profile the agent-runner variant with py-spy")
    parser.add_argument("--under-spy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.iterations < 2 or args.runs < 1:
        parser.error("--iterations must be at least 2 and --runs at least 1")
    if args.spy:
        return profile(args.iterations, args.runs, args.size)
    variants = tuple(v for v in args.variants.split(",") if v)
    asyncio.run(run_variants(args.iterations, args.runs, SIZES[args.size], variants, args.under_spy))
    return 0


if __name__ == "__main__":
    from _script import run  # bench/ is this script's own directory

    run(main)
