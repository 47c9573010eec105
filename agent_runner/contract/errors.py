"""The runner's one error tree.

Every failure a user can see is one of these, whether it is raised in their own process (the client, the worker's
start-up) or carried across Temporal as an ``ApplicationError`` whose ``type`` is the class name::

    AgentRunnerError
    ├── ConfigurationError        the developer's mistake, found before anything runs
    │   └── ToolRegistrationError a tool module or option that cannot be registered
    ├── AgentRunError             a run that failed or cannot go on
    │   ├── InvalidRunInput       the run's input was rejected at start; nothing was sent to Claude
    │   ├── ToolNotRegistered     the run names a tool no worker registered
    │   ├── ModelRequestRejected  Claude's API refused a request with a non-retryable status (400, 401, 403, 404, 413)
    │   ├── MalformedReply        Claude's API (or a proxy before it) sent a reply the loop cannot use
    │   ├── EditRejected          a steering update (inject, retry, approve, ...) was refused; the message says why
    │   ├── EditQueued            an edit is queued, but the run waits for a person before it can apply
    │   ├── RunCancelled          somebody cancelled the run
    │   ├── RunNotFound           no run has that id
    │   ├── RunAlreadyExists      a run with that id exists already (running or ended)
    │   └── NoWorker              no worker polls the run's task queue, so nothing can answer or run it
    └── StoreError                the content store refused an operation or cannot be reached
        ├── BlobMissing           a reference names content the store does not hold
        └── BlobCorrupted         stored content no longer hashes to its reference; it was not used

The workflow fails with ``ApplicationError(type=<class name>, non_retryable=True)`` rather than raising these
classes, because any other exception would fail only the workflow *task*, which Temporal retries forever. The
client turns such a failure back into the class of the same name (``error_from_failure``).

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class AgentRunnerError(Exception):
    """The root of every error this project raises."""


class ConfigurationError(AgentRunnerError):
    """A setup mistake found before any run starts: fix the configuration and start again."""


class ToolRegistrationError(ConfigurationError):
    """A tool module or tool option that a worker cannot register."""


class AgentRunError(AgentRunnerError):
    """A run that failed, or an operation on a run that cannot be done."""


class InvalidRunInput(AgentRunError):
    """The run's input was rejected when the run started. Nothing was sent to Claude."""


class ToolNotRegistered(AgentRunError):
    """The run names a tool that no worker on its task queue registered."""


class ModelRequestRejected(AgentRunError):
    """Claude's API rejected a request with a status that retrying cannot fix."""


class MalformedReply(AgentRunError):
    """Claude's API, or something between it and the worker, sent a reply the loop cannot use; the message says how."""


class EditRejected(AgentRunError):
    """A steering update was refused, before or while it applied; nothing was changed."""


class EditQueued(AgentRunError):
    """An edit the run holds queued, that the caller stopped waiting for because the run waits for a person.

    The edit applies at the run's next boundary, which comes once the person acted (an approval, a step-mode advance).

    Args:
        message: What the run waits for.
        seq: The queued edit's number, for the ``edit_outcome`` query.
    """

    def __init__(self, message: str, *, seq: int = 0) -> None:
        super().__init__(message)
        self.seq = seq


class RunCancelled(AgentRunError):
    """The run was cancelled before it finished."""


class RunNotFound(AgentRunError):
    """No run has the given id."""


class RunAlreadyExists(AgentRunError):
    """A run was started with the id of an existing run, running or ended; ids are never reused."""


class ScheduleAlreadyExists(AgentRunError):
    """A schedule was created with the id of an existing one."""


class ScheduleNotFound(AgentRunError):
    """No schedule has the given id."""


class NoWorker(AgentRunError):
    """No worker polls the run's task queue: queries, edits and the run itself wait until one starts."""


class RunStuck(AgentRunError):
    """The run's workflow task keeps failing on the workers: queries and edits cannot reach it.

    A bug in the workers' code, or code that cannot replay the run; once workers that can run it poll, it goes on.
    """


class StoreError(AgentRunnerError):
    """The content store (``agent_runner.store``) refused an operation or cannot be reached; the message says why."""


class BlobMissing(StoreError):
    """A reference names a blob or chain node that the store does not hold.

    Args:
        message: What is missing and what to do about it.
        refs: The missing references, in the order they were asked for.
        url: The store's URL, without its password.
    """

    def __init__(self, message: str, *, refs: tuple[str, ...] = (), url: str = "") -> None:
        super().__init__(message)
        self.refs = refs
        self.url = url


class BlobCorrupted(StoreError):
    """Content read from the store does not hash to its reference: it changed after it was stored.

    A blob's bytes are checked against its ref, a transcript's chain nodes against its head. The content is never
    used: never sent to Claude, never handed to a tool or a client.

    Args:
        message: What is corrupted and what to do about it.
        refs: The corrupted references (blobs, or a transcript's head), in the order they were asked for.
        url: The store's URL, without its password.
    """

    def __init__(self, message: str, *, refs: tuple[str, ...] = (), url: str = "") -> None:
        super().__init__(message)
        self.refs = refs
        self.url = url


ERRORS_BY_NAME: dict[str, type[AgentRunnerError]] = {
    cls.__name__: cls
    for cls in (
        AgentRunnerError,
        ConfigurationError,
        ToolRegistrationError,
        AgentRunError,
        InvalidRunInput,
        ToolNotRegistered,
        ModelRequestRejected,
        MalformedReply,
        EditRejected,
        EditQueued,
        RunCancelled,
        RunNotFound,
        RunAlreadyExists,
        NoWorker,
        RunStuck,
        StoreError,
        BlobMissing,
        BlobCorrupted,
    )
}
"""Each error class by the ``ApplicationError.type`` a run fails with."""


def validation_summary(error: ValidationError, whole: str = "value") -> str:
    """A pydantic ``ValidationError`` in one line (``field.path: message; ...``), for a message that says what to fix.

    Args:
        error: What pydantic found.
        whole: What an error about the whole value (no field path) is said to be about.
    """
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or whole}: {e['msg']}" for e in error.errors())
