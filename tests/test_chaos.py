"""A chaos soak: many runs at once while workers are killed, the Temporal server restarts and Claude's API fails.

Every run calls an `at_most_once` payment tool (half with a `reconcile` function, half without) and an idempotent
slow step, through two worker processes that are `kill -9`ed and restarted in turn, a Temporal server killed and
restarted on its database, and a fake Messages API that answers every third request with a fault (529 with
`retry-after`, 500, a dropped connection, a stream cut off). The invariants are what a user relies on:

- every run ends, completed, within a bound, also when the shared PostgreSQL store stops answering for a while;
- no payment is made twice for one `tool_use` (the effects journal has each key at most once);
- a run whose payment tool reconciles ends with exactly one payment.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.contract.types import RunResult
from agent_runner.temporal_server import EmbeddedTemporal
from agent_runner.testing import (
    Disconnect,
    DropMidStream,
    FakeMessagesAPI,
    Fault,
    Reply,
    ScriptItem,
    end_turn,
    text,
    tool_use,
)
from tests.test_durability import connect, worker_process

pytestmark = pytest.mark.slow

RUNS = 8
FAST = {"heartbeat_timeout": "PT2S", "initial_interval": "PT0.2S", "maximum_interval": "PT1S"}


def chaotic_claude() -> Any:
    """Claude as a function of the conversation, with a fault on every third request."""
    count = itertools.count(1)
    lock = threading.Lock()
    faults: list[ScriptItem] = [
        Fault(529, headers={"retry-after": "0.2"}),
        Fault(500),
        Disconnect(),
    ]

    def respond(body: dict[str, Any]) -> ScriptItem:
        with lock:
            n = next(count)
        messages = body["messages"]
        run_no = messages[0]["content"].split()[-1]
        tool = "pay_reconciled" if int(run_no) % 2 else "pay"
        answered = any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in messages
        )
        reply = (
            end_turn(f"Run {run_no} is done.")
            if answered
            else Reply(
                content=[
                    text("Paying and stepping."),
                    tool_use(f"toolu_pay_{run_no}", tool, {"amount": int(run_no)}),
                    tool_use(f"toolu_step_{run_no}", "slow_step", {"step": f"step{run_no}"}),
                ],
                stop_reason="tool_use",
            )
        )
        if n % 3 == 0:
            kind = (n // 3) % 4
            return DropMidStream(reply, after_events=3) if kind == 3 else faults[kind]
        return reply

    return respond


def _postgres_pids(url: str) -> list[int]:
    """The processes of the PostgreSQL cluster listening on ``url``'s port: its postmaster and every child."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    parents: dict[int, int] = {}
    postmaster = None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if args and args[0].endswith(b"postgres") and b"-p" in args and port.encode() in args:
            postmaster = int(proc.name)
    assert postmaster is not None, f"no postmaster on port {port}"
    return [postmaster, *(pid for pid, parent in parents.items() if parent == postmaster)]


@contextlib.contextmanager
def _frozen(url: str) -> Iterator[None]:
    """The PostgreSQL cluster on ``url`` stopped for the block (every call to it hangs), and going on after it, even
    when the block fails. A backend that exits between being listed and being stopped (the connection of a worker just
    killed) is skipped."""
    stopped: list[int] = []
    try:
        for pid in _postgres_pids(url):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("store", ["sqlite", "postgres-frozen"])
async def test_runs_survive_killed_workers_a_restarted_server_and_api_faults_with_no_payment_twice(
    store: str, tmp_path: Path, fake_api: FakeMessagesAPI, request: pytest.FixtureRequest
) -> None:
    fake_api.responder = chaotic_claude()
    effects, marks = tmp_path / "effects.txt", tmp_path / "marks.txt"
    env = {"AGENT_RUNNER_TEST_EFFECTS": str(effects), "AGENT_RUNNER_TEST_SLOW_SECONDS": "4"}
    postgres_url = request.getfixturevalue("postgres_url") if store == "postgres-frozen" else None
    if postgres_url is not None:
        env["AGENT_RUNNER_STORE"] = postgres_url
    temporal = EmbeddedTemporal(tmp_path / "temporal.db")
    await temporal.astart()
    address = temporal.address
    task_queue = f"chaos-{uuid.uuid4()}"
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    try:
        runner = AgentRunner(await connect(address), task_queue=task_queue)
        workers = [worker_process(address, task_queue, fake_api, marks, log, env=env) for log in logs]
        procs = [w.__enter__() for w in workers]
        try:
            runs = [
                await runner.start(
                    model="claude-fake-1",
                    max_tokens=256,
                    messages=[{"role": "user", "content": f"Pay and step for run {i}"}],
                    tools=["pay", "pay_reconciled", "slow_step"],
                    thread=False,
                    model_activity=FAST,
                )
                for i in range(RUNS)
            ]
            # Chaos for about 20 seconds: a worker killed and replaced every 3 s, the server once.
            for round_no in range(7):
                await asyncio.sleep(3)
                victim = round_no % 2
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                workers[victim].__exit__(None, None, None)
                if round_no == 5 and postgres_url is not None:
                    # The shared store stops answering for 4 s (every call hangs), then comes back.
                    with _frozen(postgres_url):
                        await asyncio.sleep(4)
                if round_no == 3:
                    temporal.kill()
                    await asyncio.sleep(1.0)
                    temporal = EmbeddedTemporal(tmp_path / "temporal.db", port=int(address.rsplit(":", 1)[1]))
                    await temporal.astart()
                workers[victim] = worker_process(address, task_queue, fake_api, marks, logs[victim], env=env)
                procs[victim] = workers[victim].__enter__()
            async with asyncio.timeout(120):  # the bound: no run stuck
                ended = [RunResult.model_validate(r) for r in await asyncio.gather(*(r.handle.result() for r in runs))]
        finally:
            for w in workers:
                w.__exit__(None, None, None)
    finally:
        await temporal.astop()
    assert [r.status for r in ended] == ["completed"] * RUNS
    lines = effects.read_text().splitlines()
    paid = [line.split()[1] for line in lines if line.startswith("paid ")]
    assert len(paid) == len(set(paid)), f"a payment was made twice: {lines}"
    # One idempotency key per tool_use, whatever the attempts. (A `pay` call whose worker died before it started
    # is never started: Claude is told its outcome is unknown.)
    assert len({line.split()[1] for line in lines if line.startswith("start ")}) <= RUNS
    amounts = [int(line.split()[2]) for line in lines if line.startswith("paid ")]
    for run_no in range(RUNS):
        # A reconciling tool (odd runs) always ends with its payment made exactly once; the others at most once.
        assert amounts.count(run_no) == (1 if run_no % 2 else amounts.count(run_no)) <= 1, lines
    finals = [r.final_message["content"][0]["text"] for r in ended if r.final_message]
    assert sorted(finals) == sorted(f"Run {i} is done." for i in range(RUNS))
