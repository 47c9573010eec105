"""``agent-runner-worker --processes N`` and the worker's tuning flags.

The supervisor tests run the real command (``python worker.py``) as a subprocess against the session's Temporal server
and fake Messages API, find its children in ``/proc``, and kill them for real.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import FixedSizeSlotSupplier

from agent_runner.backpressure import Backpressure, ResponsiveSlotSupplier, StepDelayInterceptor
from agent_runner.client import AgentRunner
from agent_runner.testing import FakeMessagesAPI, end_turn
from agent_runner.worker import WorkerTuning, build_worker
from tests.conftest import IMPORTS_ANTHROPIC

ROOT = Path(__file__).resolve().parent.parent


def worker_command(*args: str, importtime: bool = False) -> list[str]:
    """``python worker.py ARGS``; with ``importtime``, the process (not the workers it starts) lists its imports."""
    return [sys.executable, *(["-X", "importtime"] if importtime else []), str(ROOT / "worker.py"), *args]


def children(pid: int) -> set[int]:
    """The living child processes of ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def wait_until(predicate: object, what: str, timeout: float = 60.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@contextmanager
def supervisor(
    address: str,
    fake: FakeMessagesAPI,
    log: Path,
    *args: str,
    env: dict[str, str] | None = None,
    importtime: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    full_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    with log.open("ab") as out:
        command = worker_command(*args, importtime=importtime)
        proc = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for child in children(proc.pid):
                os.kill(child, signal.SIGKILL)
            proc.kill()
        proc.wait()


def ready_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "Worker ready (process " in line]


# ------------------------------------------------------------------------------------------------------------------
# Flags
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--processes", "0"], "error: --processes must be at least 1, not 0."),
        (["--max-concurrent-activities", "0"], "error: --max-concurrent-activities must be at least 1, not 0."),
        (["--max-cached-workflows", "-1"], "error: --max-cached-workflows must be 0 or more, not -1."),
        (
            ["--max-concurrent-workflow-tasks", "1"],
            "error: --max-concurrent-workflow-tasks must be at least 2, not 1.",
        ),
        (["--sticky-queue-timeout", "0"], "error: --sticky-queue-timeout must be more than 0 seconds, not 0.0."),
        (
            ["--sticky-queue-timeout", "soon"],
            "error: argument --sticky-queue-timeout: not a number of seconds: 'soon' (see --help)",
        ),
        (["--processes", "two"], "error: argument --processes: invalid int value: 'two' (see --help)"),
        (
            ["--max-loop-lag", "0"],
            "error: --max-loop-lag must be more than 0 seconds, not 0.0.",
        ),
        (
            ["--min-concurrent-activities", "0"],
            "error: --min-concurrent-activities must be at least 1, not 0.",
        ),
        (
            ["--metrics-port", "99999"],
            "error: argument --metrics-port: not a port number (1 to 65535): '99999' (see --help)",
        ),
        (
            ["--metrics-port", "65535", "--processes", "2"],
            "error: --metrics-port 65535 leaves some of the 2 processes no port (each serves on the next one, up to "
            "65535): give a lower port.",
        ),
        (
            ["--max-activities-per-second", "-5"],
            "error: argument --max-activities-per-second: not a number of activities per second above 0: '-5' (see "
            "--help)",
        ),
        (
            ["--backpressure", "--min-concurrent-activities", "50", "--max-concurrent-activities", "10"],
            "error: --min-concurrent-activities (50) must not be more than --max-concurrent-activities (10) with "
            "--backpressure: lower the one or raise the other.",
        ),
        (
            ["--log-format", "xml"],
            "error: argument --log-format: invalid choice: 'xml' (choose from text, json) (see --help)",
        ),
    ],
)
def test_a_bad_flag_value_stops_the_worker_with_one_line_saying_what_is_wrong(flags: list[str], message: str) -> None:
    _refused_at_once(flags, {}, message)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "AGENT_RUNNER_WORKER_PROCESSES",
            "abc",
            "error: $AGENT_RUNNER_WORKER_PROCESSES is 'abc', not a whole number of processes: set it to one, or unset "
            "it (see --help)",
        ),
        (
            "AGENT_RUNNER_METRICS_PORT",
            "abc",
            "error: $AGENT_RUNNER_METRICS_PORT is 'abc', not a port number (1 to 65535): set it to one, or unset it "
            "(see --help)",
        ),
        (
            "AGENT_RUNNER_METRICS_PORT",
            "99999",
            "error: $AGENT_RUNNER_METRICS_PORT is '99999', not a port number (1 to 65535): set it to one, or unset it "
            "(see --help)",
        ),
        (
            "AGENT_RUNNER_LOG_FORMAT",
            "xml",
            "error: $AGENT_RUNNER_LOG_FORMAT is 'xml', not text or json: set it to one, or unset it (see --help)",
        ),
    ],
)
def test_a_bad_environment_value_stops_the_worker_with_one_line_naming_it(name: str, value: str, message: str) -> None:
    """argparse checks neither types nor choices of defaults: the worker checks what the environment sets."""
    _refused_at_once([], {name: value}, message)


def _refused_at_once(flags: list[str], env: dict[str, str], message: str) -> None:
    # Before the worker loads (Anthropic's types take seconds to import): a typo is refused at once.
    done = subprocess.run(
        worker_command(*flags, importtime=True),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert IMPORTS_ANTHROPIC.search(done.stderr) is None, "the worker loaded before refusing a bad flag"
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith(message)


def test_a_tls_file_that_is_missing_stops_the_worker_with_one_line_naming_it(tmp_path: Path) -> None:
    """temporalio reads the TLS files only when it connects, and lets a FileNotFoundError through."""
    missing = tmp_path / "client.pem"
    done = subprocess.run(
        worker_command(),
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TEMPORAL_ADDRESS": "127.0.0.1:1",
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(missing),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(missing),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.endswith(
        f"error: Cannot read {missing}, which Temporal's client configuration names (No such file or directory): "
        "fix the path in TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH, "
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH or the config profile."
    )


async def test_tuning_reaches_the_temporal_worker(client: Client) -> None:
    tuning = WorkerTuning(
        max_concurrent_workflow_tasks=50,
        max_concurrent_activities=700,
        max_cached_workflows=300,
        sticky_queue_timeout=timedelta(seconds=4),
        backpressure=None,
    )
    config = build_worker(client, task_queue=f"tuning-{uuid.uuid4()}", tuning=tuning).config()
    assert (
        config.get("max_concurrent_workflow_tasks"),
        config.get("max_concurrent_activities"),
        config.get("max_cached_workflows"),
        config.get("sticky_queue_schedule_to_start_timeout"),
        config.get("tuner"),
    ) == (50, 700, 300, timedelta(seconds=4), None)
    # By default, a fixed number of slots; with backpressure, activity slots come from its supplier, up to
    # --max-concurrent-activities.
    default = build_worker(client, task_queue=f"tuning-{uuid.uuid4()}").config()
    assert (default.get("tuner"), default.get("max_concurrent_activities")) == (None, 1000)
    default = build_worker(
        client, task_queue=f"tuning-{uuid.uuid4()}", tuning=WorkerTuning(backpressure=Backpressure())
    ).config()
    tuner = default.get("tuner")
    assert tuner is not None
    activities = tuner._get_activity_task_slot_supplier()
    assert isinstance(activities, ResponsiveSlotSupplier)
    assert (activities.max_slots, activities.min_slots, default.get("max_cached_workflows")) == (1000, 10, 1000)
    assert tuner._get_workflow_task_slot_supplier() == FixedSizeSlotSupplier(100)
    assert [type(i) for i in default.get("interceptors", [])] == [StepDelayInterceptor]


# ------------------------------------------------------------------------------------------------------------------
# The supervisor
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_processes_share_the_queue_a_killed_one_is_restarted_and_sigterm_stops_them_all(
    temporal_address: str, client: Client, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    queue = f"processes-{uuid.uuid4()}"
    log = tmp_path / "worker.log"
    runner = AgentRunner(client, task_queue=queue)
    fake_api.responder = lambda _body: end_turn("done")
    with supervisor(temporal_address, fake_api, log, "--task-queue", queue, "--processes", "3") as proc:
        await asyncio.to_thread(wait_until, lambda: len(ready_lines(log)) == 3, "three workers ready")
        first = children(proc.pid)
        assert len(first) == 3
        assert sorted(line.split("Worker ready (process ")[1][:3] for line in ready_lines(log)) == ["1/3", "2/3", "3/3"]

        runs = [
            await runner.start(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) for _ in range(6)
        ]
        assert [(await r.result()).status for r in runs] == ["completed"] * 6

        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        await asyncio.to_thread(wait_until, lambda: len(ready_lines(log)) == 4, "the killed process replaced")
        second = children(proc.pid)
        assert len(second) == 3 and victim not in second and first - {victim} <= second
        run = await runner.start(model="m", max_tokens=10, messages=[{"role": "user", "content": "again"}])
        assert (await run.result()).status == "completed"

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0
    assert not any(alive(pid) for pid in second)
    text = log.read_text()
    assert "exited with signal SIGKILL: restarting it" in text
    assert text.count("Shutting down: finishing in-flight work") == 3


@pytest.mark.slow
def test_children_that_keep_dying_stop_the_supervisor_with_a_clear_message(
    temporal_address: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    (tmp_path / "dies_on_import.py").write_text("import os\n\nos._exit(3)\n")
    log = tmp_path / "worker.log"
    with supervisor(
        temporal_address,
        fake_api,
        log,
        "--tools",
        "dies_on_import",
        "--processes",
        "2",
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
    ) as proc:
        assert proc.wait(timeout=90) == 1
    lines = log.read_text().splitlines()
    assert lines[-1].endswith(
        "error: worker processes keep dying: 5 restarts in 60 s, and process 1 just exited with code 3. "
        "Read their errors above; fix the cause, then start the worker again."
    ) or lines[-1].endswith(
        "error: worker processes keep dying: 5 restarts in 60 s, and process 2 just exited with code 3. "
        "Read their errors above; fix the cause, then start the worker again."
    )
    assert sum("exited with code 3: restarting it" in line for line in lines) == 5


def test_a_child_that_cannot_start_with_its_configuration_stops_the_supervisor_at_once(
    temporal_address: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    flags = ("--tools", "no_such_module_here", "--processes", "2")
    with supervisor(temporal_address, fake_api, log, *flags, importtime=True) as proc:
        assert proc.wait(timeout=90) == 2
    # The supervisor only starts and watches processes: it never loads the worker (nor its memory's worth of types).
    assert IMPORTS_ANTHROPIC.search(log.read_text()) is None
    lines = [line for line in log.read_text().splitlines() if not line.startswith("import time:")]
    assert "restarting" not in log.read_text()
    assert lines[-1].endswith("cannot start with this configuration (see its error above); stopping the others"), lines
