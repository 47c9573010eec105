"""How much one worker process takes on (``WorkerTuning``) and when it stops taking more (``Backpressure``).

Settings only: the command line builds and checks them before it loads the worker (``worker_command.py``), so a bad
flag is refused at once, and ``agent_runner.worker`` and ``agent_runner.backpressure`` put them to work.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from agent_runner.contract.errors import ConfigurationError

__all__ = ["Backpressure", "WorkerTuning"]


@dataclass(frozen=True)
class Backpressure:
    """When a worker process stops taking new model and tool calls (``--max-loop-lag``, ``--max-step-delay``).

    Attributes:
        max_lag: New activity slots are granted only while the event loop's lag (how late a sleeping task wakes,
            smoothed) is below this.
        max_step_delay: ... and while runs' steps between two activities (their workflow task: sticky-queue wait
            and processing, smoothed over recent activities) take less than this. Keep it well under the sticky
            queue's timeout (10 s), which is where such waits end in a timeout.
        min_slots: Slots granted whatever the signals say, so a busy process still makes progress.
        sample_interval: How often the loop's lag is measured.
    """

    max_lag: timedelta = timedelta(milliseconds=100)
    max_step_delay: timedelta = timedelta(seconds=2)
    min_slots: int = 10
    sample_interval: timedelta = timedelta(milliseconds=20)

    def __post_init__(self) -> None:
        if self.max_lag <= timedelta(0):
            raise ConfigurationError(f"--max-loop-lag must be more than 0 seconds, not {self.max_lag.total_seconds()}.")
        if self.max_step_delay <= timedelta(0):
            raise ConfigurationError(
                f"--max-step-delay must be more than 0 seconds, not {self.max_step_delay.total_seconds()}."
            )
        if self.min_slots < 1:
            raise ConfigurationError(f"--min-concurrent-activities must be at least 1, not {self.min_slots}.")
        if self.sample_interval <= timedelta(0):
            raise ConfigurationError("The event loop's sample interval must be more than 0 seconds.")


@dataclass(frozen=True)
class WorkerTuning:
    """How much one worker process takes on at once (README, "Size a worker").

    Attributes:
        max_concurrent_workflow_tasks: Workflow tasks processed at once; ``None`` is Temporal's default (100).
            Workflow code runs one task at a time under the interpreter lock, so more slots only queue work inside
            the process: raise ``--processes`` instead.
        max_concurrent_activities: Activities (model calls, tools) in flight at once, at most. A model call mostly
            waits on the network, so one process holds many: 1,000 by default (Temporal's is 100). Beyond what the
            process can take the results of, runs' next workflow tasks wait on its sticky queue, where they time
            out, instead of in the activity queue, where they do not: set this to about the iterations per second one
            process sustains × a model call's seconds, or turn ``backpressure`` on.
        max_cached_workflows: Runs kept in memory between their tasks (sticky cache). A run evicted from it is
            replayed from its history on its next task, which costs CPU: keep it at least the number of runs this
            process has in flight.
        sticky_queue_timeout: How long a run's next task waits for this process (which has the run cached) before
            any worker may take it. A process that is alive but busier than this replays instead of waiting; one
            that was killed delays its runs by at most this much.
        backpressure: Start new activities only while this process keeps up (``--backpressure``,
            ``agent_runner.backpressure``): calls then wait in the activity queue, not finished calls' runs on the
            sticky queue, and ``max_concurrent_activities`` is the ceiling. A run's own waits between two calls (an
            approval, a sleep, a child run, a retry's backoff) are not counted as slow steps (``after_wait.py``). Off
            (``None``, a fixed number of slots) by default: a process that keeps up needs none (deploy/README.md).
    """

    max_concurrent_workflow_tasks: int | None = None
    max_concurrent_activities: int = 1000
    max_cached_workflows: int = 1000
    sticky_queue_timeout: timedelta = timedelta(seconds=10)
    backpressure: Backpressure | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent_workflow_tasks is not None and self.max_concurrent_workflow_tasks < 2:
            raise ConfigurationError(
                f"--max-concurrent-workflow-tasks must be at least 2, not {self.max_concurrent_workflow_tasks}."
            )
        if self.max_concurrent_activities < 1:
            raise ConfigurationError(
                f"--max-concurrent-activities must be at least 1, not {self.max_concurrent_activities}."
            )
        if self.max_cached_workflows < 0:
            raise ConfigurationError(f"--max-cached-workflows must be 0 or more, not {self.max_cached_workflows}.")
        if self.sticky_queue_timeout <= timedelta(0):
            raise ConfigurationError(
                f"--sticky-queue-timeout must be more than 0 seconds, not {self.sticky_queue_timeout.total_seconds()}."
            )
