"""The README's command-line walk-through runs verbatim, as a user on a fresh clone would, and leaves nothing behind.

The block is read from README.md itself (the one after the ``walkthrough`` comment) and run by bash with
``set -euo pipefail`` from the repository, without ``ANTHROPIC_API_KEY``: `agent-runner dev` then serves the scripted
fake model. Temporal is a server of this test's own on a free port (``TEMPORAL_ADDRESS``), so the walk-through's
runs are the only ones it lists; the dev stack's files live in a temporary ``AGENT_RUNNER_HOME``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from agent_runner.temporal_server import EmbeddedTemporal

REPO = Path(__file__).resolve().parents[1]
MARK = "<!-- walkthrough: tests/test_readme_walkthrough.py runs this block verbatim -->\n"

RUN_ID = re.compile(r"agent-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def readme_block(mark: str) -> str:
    """The README's shell block right after ``mark`` (an HTML comment naming the test that runs it)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(mark) == 1, f"README.md must hold exactly one {mark.strip()}"
    block = re.match(r"```sh\n(.*?)^```$", readme.split(mark, 1)[1], re.S | re.M)
    assert block is not None, f"{mark.strip()} must come right before a ```sh block"
    return block.group(1)


def walkthrough() -> str:
    """The README's shell block right after the walk-through mark."""
    return readme_block(MARK)


def run_beside_a_dev_stack(script: str, env: dict[str, str], timeout: float) -> tuple[CompletedProcess[str], list[int]]:
    """``script`` run by bash in the repository, and the processes of its ``AGENT_RUNNER_HOME`` left when it ended.

    Whatever happened, the dev stack the script started is stopped and anything of it still alive is killed, so a
    script that failed half-way leaves nothing behind for the next test.
    """
    marker = f"AGENT_RUNNER_HOME={env['AGENT_RUNNER_HOME']}"
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        left = processes_with(marker)
    finally:
        subprocess.run(
            [sys.executable, "-m", "agent_runner.cli", "dev", "--stop"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        for leftover in processes_with(marker):
            os.kill(leftover, signal.SIGKILL)
    return done, left


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (this test's own, by its unique AGENT_RUNNER_HOME)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes() and "Z" not in _state(entry):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _state(proc: Path) -> str:
    # The field after the parenthesized command name: "R", "S", "Z" (a zombie has released everything it held).
    return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def temporal(tmp_path: Path) -> Iterator[str]:
    """A Temporal server of this test's own, on a free port: its address."""
    with EmbeddedTemporal(tmp_path / "temporal.db") as server:
        yield server.address


def _env(address: str, home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "TEMPORAL_")) and k not in ("AGENT_RUNNER_MODEL", "VIRTUAL_ENV")
    }
    # The session's store (conftest), so that what the walk-through leaves goes with the session's folder.
    env.update(TEMPORAL_ADDRESS=address, AGENT_RUNNER_HOME=str(home), NO_COLOR="1")
    return env


def _normalized(out: str) -> list[str]:
    return [TIME.sub("TIME", RUN_ID.sub("RUN", line)).rstrip() for line in out.splitlines()]


READY = [
    r"agent-runner dev is ready \(pid (?P<pid>\d+)\)",
    r"  temporal    127\.0\.0\.1:\d+ \(from TEMPORAL_ADDRESS\)",
    r"  task queue  agent-runner",
    r"  tools       get_time, get_weather \(from agent_runner\.example_tools\)",
    r"  model       the scripted fake Messages API \(ANTHROPIC_API_KEY is not set\): it calls get_weather and "
    r"get_time for the cities a prompt names, then quotes them",
    r"  store       sqlite:///.*",
    r"  try         agent-runner run \"What's the weather in Paris and Tokyo\?\" --tools get_weather",
    r"  stop        agent-runner dev --stop \(log: .*/agent-runner-home/dev\.log\)",
]

WALKTHROUGH_OUTPUT = [
    # agent-runner run "What's the weather in Paris and Tokyo?" --tools get_weather
    "RUN",
    "── turn 1 ──",
    "Let me check the weather in Paris and Tokyo.",
    '→ get_weather {"city": "Paris"}',
    '→ get_weather {"city": "Tokyo"}',
    "← get_weather: sunny, 21C in Paris",
    "← get_weather: light rain, 18C in Tokyo",
    "── turn 2 ──",
    "Here is what the tools say:",
    "- Weather in Paris: sunny, 21C",
    "- Weather in Tokyo: light rain, 18C",
    "── completed · 2 turns · stop_reason end_turn · 267 input / 109 output tokens ──",
    # RUN_ID=$(agent-runner run ... --detach) prints nothing here; agent-runner follow "$RUN_ID"
    "── turn 1 ──",
    "Let me check the local time in Sydney.",
    '→ get_time {"city": "Sydney"}',
    "← get_time: 22:05 in Sydney",
    "── turn 2 ──",
    "Here is what the tools say:",
    "- Local time in Sydney: 22:05",
    "── completed · 2 turns · stop_reason end_turn · 209 input / 73 output tokens ──",
    # agent-runner status "$RUN_ID"
    "run          RUN",
    "status       completed",
    "turns        2",
    "stop_reason  end_turn",
    "tokens       209 input / 73 output tokens",
    "messages     4",
    "version      3",
    # agent-runner transcript "$RUN_ID"
    "── user ──",
    "What's the time in Sydney?",
    "── assistant ──",
    "Let me check the local time in Sydney.",
    '→ get_time {"city": "Sydney"}',
    "← get_time: 22:05 in Sydney",
    "── assistant ──",
    "Here is what the tools say:",
    "- Local time in Sydney: 22:05",
    # agent-runner fork "$RUN_ID" --from-iteration 2
    "RUN",
    "── turn 1 ──",
    "Here is what the tools say:",
    "- Local time in Sydney: 22:05",
    "── completed · 1 turn · stop_reason end_turn · 145 input / 27 output tokens ──",
    # agent-runner list --status completed
    "ID                                          STATUS     STARTED",
    "RUN  completed  TIME",
    "RUN  completed  TIME",
    "RUN  completed  TIME",
    # inject, params, add-tools to the run waiting for approval
    "accepted; it applies before the next turn",
    "accepted; it applies before the next turn",
    "accepted; it applies before the next turn",
    # agent-runner approvals "$RUN_ID"
    "TOOL_USE_ID       TOOL         INPUT               TURN  WAITING SINCE",
    'toolu_dev_0006_1  get_weather  {"city": "London"}  1     TIME',
    # agent-runner approve "$RUN_ID" "$TOOL_USE_ID"
    "approved toolu_dev_0006_1: it runs now",
    # agent-runner follow "$RUN_ID"
    "── turn 1 ──",
    "Let me check the weather in London.",
    '→ get_weather {"city": "London"}',
    '⏸ waiting for approval: get_weather {"city": "London"} (toolu_dev_0006_1) — agent-runner approve RUN '
    "toolu_dev_0006_1",
    "← get_weather: drizzle, 15C in London",
    "── turn 2 ──",
    "Here is what the tools say:",
    "- Weather in London: drizzle, 15C",
    'You also wrote "Also answer in French.": I am the scripted fake model of `agent-runner dev`, so I can only '
    "quote the tools.",
    "── completed · 2 turns · stop_reason end_turn · 316 input / 105 output tokens ──",
]
"""What the walk-through prints after the ready block, up to the run it retries, run ids and times left out."""

ENDING = [
    # agent-runner retry "$RUN_ID": the run waits for approval of its first reply's call (as a rule: the retry may
    # come first), so the turn is resent at once
    r"applied at version \d+",
    # agent-runner stop "$RUN_ID" --reason "user closed the tab"
    r"── stopped · [0-2] turns? · stop_reason (tool_use|none) · \d+ input / \d+ output tokens ──",
    # agent-runner cancel "$RUN_ID"
    r"Cancellation of run RUN requested\.",
    r"Run RUN is cancelled: in-flight model calls and tools were stopped\.",
    # agent-runner terminate "$RUN_ID" --reason "runaway"
    r"Run RUN is terminated: runaway",
    # agent-runner dev --stop
    r"Stopped the dev stack \(pid \d+\)\.",
]
"""The rest, where the moment a command reaches its run may change the numbers."""

WAITING_NOTE = (
    "note: run RUN waits for approval of get_weather (toolu_dev_0006_1): the edit applies once it is decided "
    "(`agent-runner approve RUN toolu_dev_0006_1`, or `deny`)."
)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_readme_walkthrough_runs_verbatim_without_an_api_key(temporal: str, tmp_path: Path) -> None:
    """It prints what the README promises, ends with the stack stopped, and no process of it is left."""
    home = tmp_path / "agent-runner-home"
    env = _env(temporal, home)
    done, left = run_beside_a_dev_stack("set -euo pipefail\n" + walkthrough(), env, timeout=240)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = _normalized(done.stdout)
    ready = [re.fullmatch(pattern, line) for pattern, line in zip(READY, lines, strict=False)]
    assert all(ready), "\n".join(lines[: len(READY)])
    stack_pid = ready[0]["pid"] if ready[0] else ""
    body = lines[len(READY) : len(READY) + len(WALKTHROUGH_OUTPUT)]
    assert body == WALKTHROUGH_OUTPUT
    ending = lines[len(READY) + len(WALKTHROUGH_OUTPUT) :]
    assert len(ending) == len(ENDING) and all(map(re.fullmatch, ENDING, ending)), "\n".join(ending)
    assert ending[-1] == f"Stopped the dev stack (pid {stack_pid})."
    assert (
        _normalized(done.stderr)
        == [WAITING_NOTE, "note: if it cannot apply then, `agent-runner status RUN` says why."] * 3
    )
    assert "Traceback" not in (home / "dev.log").read_text()
    assert left == [], "the walk-through left processes running"
    assert not (home / "dev.json").exists()
