"""How soon a run goes on after its worker is ``kill -9``ed, when another worker is ready (issue 14.3).

Two cases, each ``--repeat`` times, on one embedded Temporal server (``EmbeddedTemporal``, temp sqlite db) with the
fake Messages API in this process and workers as real subprocesses (``python worker.py --tools tests.tools_for_tests``):

* ``model``: worker A takes the run's second model call, which the fake answers only after a long delay; worker B
  starts and polls the same task queue; A is killed. Measured: from the kill to the retried request reaching the fake.
* ``tool``: worker A starts the run's first ``slow_step`` call (it sleeps); B starts; A is killed. Measured: from the
  kill to the tool starting again (its mark on disk).
* ``local``: the same with ``count_local``, a tool registered with ``tool_options(local=True)``: its call is a local
  activity inside A's workflow task, so it starts again on B once that task's timeout (10 s, the run's default)
  passes.

Runs use the defaults a user gets: the model call's heartbeat timeout ``MODEL_HEARTBEAT_TIMEOUT``
(``workflows/live.py``), the retry's first interval of 1 s; ``slow_step`` declares a 2 s heartbeat timeout. What a
resume takes is about the heartbeat timeout, less the time since the last heartbeat, plus the first retry interval.

Usage::

    python bench/resume.py [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_durability import worker_process  # noqa: E402  (the tests' worker subprocess, as they run it)

SLOW = 120.0
"""How long the fake delays the model call that is killed, and how long the tool sleeps: far past any resume."""


def _responder(slow_turn: int | None, answered: set[int], tool: str) -> Callable[[dict[str, Any]], Any]:
    from agent_runner.testing import Reply, text, tool_use

    def respond(body: dict[str, Any]) -> Reply:
        turn = 1 + sum(
            1
            for m in body["messages"]
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        )
        delay = 0.0
        if turn == slow_turn and turn not in answered:
            answered.add(turn)
            delay = SLOW
        if turn <= 2:
            return Reply(
                id=f"msg_turn_{turn}",
                content=[text("Next step."), tool_use(f"toolu_{turn}", tool, {TOOL_INPUT[tool]: f"step{turn}"})],
                stop_reason="tool_use",
                delay=delay,
            )
        return Reply(id=f"msg_turn_{turn}", content=[text("Done.")], delay=delay)

    return respond


TOOL_INPUT = {"slow_step": "step", "count_local": "label"}
"""Each case's tool (``tests/tools_for_tests.py``), and its one argument."""


def _slow_tool(seconds: float, effects: Path) -> dict[str, str]:
    """What the worker's test tools sleep, and where ``count_local`` marks its starts."""
    return {"AGENT_RUNNER_TEST_SLOW_SECONDS": str(seconds), "AGENT_RUNNER_TEST_EFFECTS": str(effects)}


async def _until(predicate: Callable[[], bool], timeout: float = 60.0) -> float:
    """Wait for ``predicate``, polling often; the monotonic time it first held."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
    return time.monotonic()


async def _one(case: str, address: str, fake: Any, tmp: Path) -> float:
    from temporalio.client import Client

    from agent_runner.client import AgentRunner
    from agent_runner.connection import data_converter

    client = await Client.connect(address, data_converter=data_converter())
    task_queue = f"resume-{case}-{uuid.uuid4()}"
    runner = AgentRunner(client, task_queue=task_queue)
    fake.reset()
    tool = "count_local" if case == "local" else "slow_step"
    fake.responder = _responder(2 if case == "model" else None, set(), tool)
    marks, log = tmp / f"{task_queue}.marks", Path(os.environ.get("RESUME_LOGS", tmp)) / f"{task_queue}.log"
    starts = tmp / f"{task_queue}.effects" if case == "local" else marks  # count_local's journal, slow_step's marks
    env = _slow_tool(0.0 if case == "model" else SLOW, starts)

    def started(times: int) -> bool:
        return starts.exists() and starts.read_text().count("start step1") >= times

    with worker_process(address, task_queue, fake, marks, log, env=env) as first:
        run = await runner.start(
            model="claude-fake-1",
            max_tokens=256,
            messages=[{"role": "user", "content": "Run the two steps."}],
            tools=[tool],
        )
        if case == "model":
            await _until(lambda: len(fake.requests) >= 2)
        else:
            await _until(lambda: started(1))
        second_log = log.with_suffix(".second.log")
        with worker_process(address, task_queue, fake, marks, second_log, env=env):
            # B polls the queue before A dies: the measure is Temporal noticing A is gone, not B starting.
            await _until(lambda: second_log.exists() and "Worker ready" in second_log.read_text())
            await asyncio.sleep(1.0)  # its pollers are in, long-polling
            requests = len(fake.requests)
            killed = time.monotonic()
            first.send_signal(signal.SIGKILL)
            if case == "model":
                resumed = await _until(lambda: len(fake.requests) > requests)
            else:
                resumed = await _until(lambda: started(2))
            await run.handle.terminate("benchmark done")
    return resumed - killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="kills per case (default 3)")
    args = parser.parse_args(argv)

    from agent_runner.temporal_server import EmbeddedTemporal
    from agent_runner.testing import FakeMessagesAPI

    async def bench() -> dict[str, list[float]]:
        with tempfile.TemporaryDirectory() as tmp, FakeMessagesAPI() as fake:
            os.environ.setdefault("AGENT_RUNNER_STORE", f"sqlite:///{tmp}/store.db")
            temporal = EmbeddedTemporal(Path(tmp) / "temporal.db")
            await temporal.astart()
            try:
                found: dict[str, list[float]] = {"model": [], "tool": [], "local": []}
                for _ in range(args.repeat):
                    for case in found:
                        found[case].append(await _one(case, temporal.address, fake, Path(tmp)))
                return found
            finally:
                await temporal.astop()

    found = asyncio.run(bench())
    print("| kill -9 mid … → next request on the second worker | median s | min s | max s |")
    print("|---|---:|---:|---:|")
    labels = {"model": "model call", "tool": "tool call", "local": "local tool call"}
    for case, seconds in found.items():
        label = labels[case]
        print(f"| {label} | {statistics.median(seconds):.1f} | {min(seconds):.1f} | {max(seconds):.1f} |")
    return 0


if __name__ == "__main__":
    from _script import run  # bench/ is this script's own directory

    run(main)
