"""How the workflow fails a run, refuses an update, and retries an activity.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from agent_runner.contract.errors import AgentRunnerError, EditRejected, ToolNotRegistered
from agent_runner.contract.types import ActivityOptions


def fail(error: AgentRunnerError) -> ApplicationError:
    """The workflow failure that carries ``error`` to the client as the same class (``errors.ERRORS_BY_NAME``)."""
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=True)


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


def activity_failure(error: ActivityError) -> ApplicationError:
    """Fail the run with the activity's own error type and message, so the client sees the API's words."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or error), type="AgentRunError", non_retryable=True)


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
