"""How the workflow fails a run, refuses an update, and retries an activity.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState, TimeoutError

from agent_runner.contract.errors import AgentRunnerError, EditRejected, ToolNotRegistered
from agent_runner.contract.types import CREATE_MESSAGE_ACTIVITY, LAST_STATUS_DETAIL, ActivityOptions
from agent_runner.workflows.patches import implied


def fail(error: AgentRunnerError) -> ApplicationError:
    """The workflow failure that carries ``error`` to the client as the same class (``errors.ERRORS_BY_NAME``)."""
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=True)


def with_last_status(error: ApplicationError, status: dict[str, Any]) -> ApplicationError:
    """``error`` with the run's last ``status`` as its last detail (``LAST_STATUS_DETAIL``), its cause kept.

    A failed run has no result to carry it, as a completed one's does (``RunResult.last_status``); the history's own
    account of the run lacks what only the run knew (its transcript version, cost, child runs).
    """
    carried = ApplicationError(
        error.message,
        *error.details,
        {LAST_STATUS_DETAIL: status},
        type=error.type,
        non_retryable=error.non_retryable,
    )
    carried.__cause__ = error.__cause__
    return carried


def refused(reason: str) -> ApplicationError:
    """An update's refusal, final for every client: ``EditRejected``, not retryable."""
    return fail(EditRejected(reason))


def not_registered(missing: list[str]) -> ToolNotRegistered:
    """The error for tools (or result hooks) no worker on the run's task queue registered, with how to register them."""
    return ToolNotRegistered(
        f"No worker on task queue {workflow.info().task_queue!r} registered "
        f"{', '.join(repr(n) for n in missing)}. Start a worker with "
        "`python worker.py --tools <module that defines it>`, or pass the tool's definition as a "
        "JSON object to send it without running it."
    )


_ValidatorT = TypeVar("_ValidatorT", bound=Callable[..., None])


def refusing(validator: _ValidatorT) -> _ValidatorT:
    """A validator whose refusals reach every client as final: ``EditRejected``, not retryable.

    A plain ``ValueError`` reaches the stock ``temporal`` CLI as ``ValueError, retryable: true``, which invites
    resending what can never be accepted.
    """

    @functools.wraps(validator)
    def checked(*args: Any) -> None:
        try:
            validator(*args)
        except ValueError as e:
            raise refused(str(e)) from None

    return cast(_ValidatorT, checked)


GAVE_UP_PATCH = "activity-gave-up-says-so"
"""``workflow.patched`` id: a run whose activity ran out of attempts fails saying so, not with the last attempt's own
words ("...; retrying.", "activity StartToClose timeout") (issue 10.3)."""

_GAVE_UP = (RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT)


@contextlib.contextmanager
def failing_the_run() -> Iterator[None]:
    """Fail the run, saying so, for an activity awaited inside it that fails (``activity_failure``).

    A cancellation of the run stays a cancellation.
    """
    try:
        yield
    except ActivityError as e:
        if isinstance(e.cause, CancelledError):
            raise
        raise activity_failure(e) from None


def activity_failure(error: ActivityError) -> ApplicationError:
    """Fail the run with the activity's own error type and message, so the client sees the API's words.

    An activity that ran out of attempts says so, with its last attempt's error and the options that bound it.
    """
    cause = error.cause
    if error.retry_state in _GAVE_UP and implied(GAVE_UP_PATCH):
        return _gave_up(error.activity_type, cause or error, timed_out=error.retry_state == RetryState.TIMEOUT)
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or error), type="AgentRunError", non_retryable=True)


_OPTIONS: dict[str, str] = {CREATE_MESSAGE_ACTIVITY: "the run's `model_activity`"}
"""Where a run sets the attempts and timeouts of an activity it gave up on (the others are the runner's own, the
listing of MCP servers' tools included: ``workflows/mcp.py``, ``LIST_RETRY``; a tool that gives up fails the run
saying which tool, in ``tool_calls.py``)."""


def local_activity_failure(activity_type: str, error: ApplicationError | TimeoutError) -> ApplicationError:
    """Fail the run for a local activity that failed: one that gave up says so, as ``activity_failure`` does.

    A local activity's failure reaches the workflow as its last attempt's own error, with no ``ActivityError`` (and
    no retry state) around it, but for a timeout, which comes wrapped (the caller passes the ``TimeoutError``): an
    error its activity marked non-retryable ended it at once, any other spent its retries.
    """
    if isinstance(error, ApplicationError) and error.non_retryable:
        return ApplicationError(error.message, *error.details, type=error.type, non_retryable=True)
    # Its attempts were spent, even when the last one timed out: the runner bounds each attempt, never all of them.
    return _gave_up(activity_type, error, timed_out=False)


def _gave_up(activity_type: str, cause: BaseException, *, timed_out: bool) -> ApplicationError:
    bound = "its timeouts ran out" if timed_out else "its maximum_attempts were spent"
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower() if cause.type is not None else "its"
        last = f"it passed its {kind} timeout"
    else:
        last = str(cause).removesuffix("; retrying.").removesuffix(".")
    options = _OPTIONS.get(activity_type)
    advice = (
        f"Try again later, or give it more attempts or time ({options})."
        if options is not None
        # The runner's own lookups and hooks: no option of the run's bounds them, and another try meets the same
        # worker unless what failed there is fixed.
        else "Fix what it says on the workers (their logs have each attempt), then start the run again or fork it."
    )
    message = f"{activity_type} gave up: {bound}, and the last attempt failed ({last}). {advice}"
    details = cause.details if isinstance(cause, ApplicationError) else ()
    kind_name = cause.type if isinstance(cause, ApplicationError) else "AgentRunError"
    return ApplicationError(message, *details, type=kind_name, non_retryable=True)


def retry_policy(options: ActivityOptions) -> RetryPolicy:
    """Temporal's retries for an activity with ``options``."""
    return RetryPolicy(
        initial_interval=options.initial_interval,
        maximum_interval=options.maximum_interval,
        maximum_attempts=options.maximum_attempts,
    )


def backoff(options: ActivityOptions, attempt: int) -> timedelta:
    """The delay before retry ``attempt`` (from 1) that the workflow times itself, as ``retry_policy`` would."""
    delay: timedelta = options.initial_interval * (2 ** (attempt - 1))
    return min(delay, options.maximum_interval)
