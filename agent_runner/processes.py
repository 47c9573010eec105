"""``agent-runner-worker --processes N``: one command, N worker processes sharing the task queues.

A Python worker runs workflow code and activity bookkeeping under one interpreter lock, so one process uses about one
core. The supervisor here starts N copies of the same worker command (each a full worker: same flags, same task
queues; Temporal spreads tasks between their pollers), restarts a child that dies, and on SIGTERM or SIGINT passes
SIGTERM on to every child, which drains its in-flight work (``graceful_shutdown_timeout``) before it exits.

It runs no Temporal code itself: it only spawns, watches and signals processes, so it stays responsive however busy
the children are.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

from agent_runner.contract.errors import ConfigurationError

__all__ = ["CONFIGURATION_EXIT_CODE", "PROCESS_INDEX_ENV", "RestartPolicy", "supervise"]

logger = logging.getLogger("agent_runner.worker")

PROCESS_INDEX_ENV = "AGENT_RUNNER_WORKER_PROCESS"
"""Set in each child to ``i/N`` (1-based), so its log lines and metrics port can tell the processes apart."""

CONFIGURATION_EXIT_CODE = 2
"""A child's exit code for a configuration it cannot start with (it logged why): restarting it cannot help."""


@dataclass(frozen=True)
class RestartPolicy:
    """When the supervisor gives up on children that keep dying.

    Attributes:
        max_restarts: Restarts allowed within ``window`` seconds, all children together; one more and the
            supervisor stops the rest and exits non-zero.
        window: The sliding window, in seconds, in which restarts are counted.
        delay: Seconds to wait before restarting a child that died (a crash loop should not spin a core).
    """

    max_restarts: int = 5
    window: float = 60.0
    delay: float = 1.0


@dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes]
    restart_at: float | None = None
    last_exit: int | None = None


@dataclass
class _Supervisor:
    command: Sequence[str]
    processes: int
    policy: RestartPolicy
    env: dict[str, str]
    stop_timeout: float
    children: list[_Child] = field(default_factory=list)
    restarts: deque[float] = field(default_factory=deque)
    stopping: bool = False

    def spawn(self, index: int) -> subprocess.Popen[bytes]:
        env = {**self.env, PROCESS_INDEX_ENV: f"{index}/{self.processes}"}
        # The child inherits stdout/stderr: one log stream for the whole worker, each line saying its process.
        return subprocess.Popen(list(self.command), env=env)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if not self.stopping:
            logger.info("Received %s: stopping %d worker processes", signal.Signals(signum).name, self.processes)
        self.stopping = True

    def terminate_all(self) -> None:
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)

    def wait_all(self) -> None:
        deadline = time.monotonic() + self.stop_timeout
        for child in self.children:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                child.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                logger.error("Worker process %d did not stop in %.0f s: killing it", child.index, self.stop_timeout)
                child.proc.kill()
                child.proc.wait()

    def run(self) -> int:
        self.children = [_Child(i, self.spawn(i)) for i in range(1, self.processes + 1)]
        logger.info("Started %d worker processes: pids %s", self.processes, [c.proc.pid for c in self.children])
        try:
            while not self.stopping:
                code = self.watch()
                if code is not None:
                    self.terminate_all()
                    self.wait_all()
                    return code
                time.sleep(0.1)
            self.terminate_all()
            self.wait_all()
            return 0
        except BaseException:
            for child in self.children:
                if child.proc.poll() is None:
                    child.proc.kill()
                    child.proc.wait()
            raise

    def watch(self) -> int | None:
        """Restart the children that died; an exit code for the supervisor when it must give up."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restart_at = None
                    child.proc = self.spawn(child.index)
                    logger.info("Restarted worker process %d: pid %d", child.index, child.proc.pid)
                continue
            code = child.proc.poll()
            if code is None or self.stopping:
                continue
            child.last_exit = code
            if code == CONFIGURATION_EXIT_CODE:
                logger.error(
                    "error: worker process %d cannot start with this configuration (see its error above); "
                    "stopping the others",
                    child.index,
                )
                return CONFIGURATION_EXIT_CODE
            while self.restarts and now - self.restarts[0] > self.policy.window:
                self.restarts.popleft()
            if len(self.restarts) >= self.policy.max_restarts:
                logger.error(
                    "error: worker processes keep dying: %d restarts in %.0f s, and process %d just exited with %s. "
                    "Read their errors above; fix the cause, then start the worker again.",
                    len(self.restarts),
                    self.policy.window,
                    child.index,
                    _describe_exit(code),
                )
                return 1
            self.restarts.append(now)
            logger.warning(
                "Worker process %d (pid %d) exited with %s: restarting it in %.1f s",
                child.index,
                child.proc.pid,
                _describe_exit(code),
                self.policy.delay,
            )
            child.restart_at = now + self.policy.delay
        return None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def supervise(
    command: Sequence[str],
    processes: int,
    *,
    policy: RestartPolicy | None = None,
    env: dict[str, str] | None = None,
    stop_timeout: float = 60.0,
    install_signal_handlers: Callable[[Callable[[int, FrameType | None], None]], None] | None = None,
) -> int:
    """Run ``processes`` copies of ``command`` until SIGTERM or SIGINT, restarting any that dies.

    Args:
        command: The child's command line (the worker command, without ``--processes``).
        processes: How many children to keep running; at least 1.
        policy: When to give up on children that keep dying.
        env: The children's environment (``os.environ`` by default); each also gets ``AGENT_RUNNER_WORKER_PROCESS``.
        stop_timeout: After SIGTERM, seconds the children get to drain before they are killed (longer than the
            worker's ``graceful_shutdown_timeout``).
        install_signal_handlers: Installs the handler for SIGTERM and SIGINT; ``signal.signal`` for both by default.

    Returns:
        0 after a requested stop; 2 when a child stopped for its configuration; 1 when children kept dying.

    Raises:
        ConfigurationError: ``processes`` is below 1.
    """
    if processes < 1:
        raise ConfigurationError(f"--processes must be at least 1, not {processes}.")
    supervisor = _Supervisor(
        command=command,
        processes=processes,
        policy=policy or RestartPolicy(),
        env=dict(os.environ) if env is None else env,
        stop_timeout=stop_timeout,
    )
    if install_signal_handlers is None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, supervisor.on_signal)
    else:
        install_signal_handlers(supervisor.on_signal)
    return supervisor.run()


def child_command(argv: Sequence[str]) -> list[str]:
    """The command that runs one worker process with ``argv`` (the supervisor's own flags, ``--processes`` removed)."""
    return [sys.executable, "-c", "from agent_runner.worker_command import console_main; console_main()", *argv]
