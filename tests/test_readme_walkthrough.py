"""The README's command-line walk-through runs verbatim, as a user on a fresh clone would, and leaves nothing behind.

The block is read from README.md itself (the one after the ``walkthrough`` comment) and run by bash with
``set -euo pipefail`` from the repository, without ``ANTHROPIC_API_KEY``: `agent-runner dev` then serves the scripted
fake model. Temporal is a server of this test's own on a free port (``TEMPORAL_ADDRESS``), so the walk-through's
runs are the only ones it lists; the dev stack's files live in a temporary ``AGENT_RUNNER_HOME``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.temporal_server import EmbeddedTemporal

REPO = Path(__file__).resolve().parents[1]
MARK = "<!-- walkthrough: tests/test_readme_walkthrough.py runs this block verbatim -->\n"

RUN_ID = re.compile(r"agent-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def walkthrough() -> str:
    """The README's shell block right after the walk-through mark."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(MARK) == 1, "README.md must mark exactly one walk-through"
    block = re.match(r"```sh\n(.*?)^```$", readme.split(MARK, 1)[1], re.S | re.M)
    assert block is not None, "the walk-through mark must come right before a ```sh block"
    return block.group(1)


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


@pytest.mark.timeout(300)
def test_the_readme_walkthrough_runs_verbatim_without_an_api_key(temporal: str, tmp_path: Path) -> None:
    home = tmp_path / "agent-runner-home"
    env = _env(temporal, home)
    script = "set -euo pipefail\n" + walkthrough()
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False
        )
        left = processes_with(f"AGENT_RUNNER_HOME={home}")
    finally:
        # A walk-through that failed half-way leaves its dev stack up: stop it, whatever happened.
        subprocess.run(
            [sys.executable, "-m", "agent_runner.cli", "dev", "--stop"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        for pid in processes_with(f"AGENT_RUNNER_HOME={home}"):
            os.kill(pid, 9)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert left == [], "the walk-through left processes running"
    assert not (home / "dev.json").exists()
    print(done.stdout)
    print(done.stderr)
