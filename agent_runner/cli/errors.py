"""The one place where an error becomes an exit code and a one-line message for a person.

A command raises; ``report`` prints ``error: <message>`` on stderr and gives the exit code. Errors of the runner's
own tree (``agent_runner.contract.errors``) say what to do already. An error that is not the user's to act on (a
bug) is not reported here: ``main`` prints its traceback.
"""

from __future__ import annotations

from temporalio.client import WorkflowQueryFailedError, WorkflowQueryRejectedError

from agent_runner.cli.common import EXIT_ERROR, err
from agent_runner.contract.errors import AgentRunnerError, StoreError


def message(error: BaseException) -> str | None:
    """The line that tells a person about ``error``, or ``None`` when it is a bug rather than their problem."""
    if isinstance(error, StoreError):
        # One line, even when the database driver's message has several.
        return " ".join(str(error).split())
    if isinstance(error, AgentRunnerError):
        return str(error)
    if isinstance(error, (WorkflowQueryFailedError, WorkflowQueryRejectedError)):
        # The client passes these through when a run's replies cannot be read: the worker could not answer (a broken
        # deployment, or a workflow that can no longer replay). Still the user's problem to see, not a bug.
        return f"the run's worker could not answer a query: {error}"
    return None


def report(error: BaseException) -> int | None:
    """Print ``error: <message>`` for an error a person can act on, and return the exit code; ``None`` for a bug."""
    line = message(error)
    if line is None:
        return None
    err(f"error: {line}")
    return EXIT_ERROR
