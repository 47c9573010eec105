"""What the run does for its live channel and for a quick resume of a lost model call (issue 14).

Live deltas no longer reach the run: the model call writes them to the run's live log in the content store
(``activities/live_events.py``). The run publishes ``recorded_call`` when it records a reply, so a client knows every
live event of that attempt came before it (``Run.events``). A model call heartbeats every 1.5 s while it streams,
so its heartbeat timeout can be short: a worker killed mid call is noticed within seconds.

Both change what a run does, so both go behind ``workflow.patched``: a run recorded before replays as it ran.
"""

from __future__ import annotations

from datetime import timedelta

from agent_runner.contract.types import ActivityOptions
from agent_runner.workflows.patches import since

LIVE_LOG_PATCH = "live-log-and-short-model-heartbeat"
"""``workflow.patched`` id of both: the ``recorded_call`` event (live deltas in the store, not in history), and
``MODEL_HEARTBEAT_TIMEOUT`` as the model call's default heartbeat timeout. One id, so a run records one marker."""

MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=3)
"""The model call's heartbeat timeout unless the run sets one (``model_activity.heartbeat_timeout``).

A call that lasts more than 1.5 s heartbeats every 1.5 s (``activities/heartbeats.py``), and the worker sends each
to Temporal within a second (``max_heartbeat_throttle_interval``), so only a worker that is gone, or whose event loop
is stuck for seconds, misses it; Temporal then retries the call on another worker after ``initial_interval``."""


def records_calls() -> bool:
    """Whether this run publishes ``recorded_call`` (it began, or was replayed past this point, on this version)."""
    return since(LIVE_LOG_PATCH)


def model_heartbeat_timeout(options: ActivityOptions) -> timedelta | None:
    """The model call's heartbeat timeout: the run's own, else ``MODEL_HEARTBEAT_TIMEOUT`` (before it: 30 s)."""
    if "heartbeat_timeout" in options.model_fields_set or not since(LIVE_LOG_PATCH):
        return options.heartbeat_timeout
    return MODEL_HEARTBEAT_TIMEOUT
