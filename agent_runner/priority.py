"""A run's place in its task queues: Temporal's priority key and fairness key (``temporalio.common.Priority``).

A run started with a ``Priority`` carries it on its workflow, and Temporal does the rest, so no workflow code sets
one: the server queues every activity the run schedules (model and tool calls, which set none of their own) under
the run's, starts its sub-agents' child runs with it and carries it over continue-as-new (``tests/test_priority.py``
checks each on the dev server). A fleet serving many tenants starts each tenant's runs with its own ``fairness_key``:
with fairness on in the server's dynamic config (``matching.enableFairness``), a queue's backlog is dispatched
across keys in proportion to their weights, so one tenant's thousand runs do not starve another's one.

The server's own limits are checked here, before anything starts, so a bad value is refused with what to do
rather than clamped or rejected by Temporal in its own words.
"""

from __future__ import annotations

from temporalio.api.common.v1 import Priority as PriorityProto
from temporalio.common import Priority

from agent_runner.contract.errors import InvalidRunInput

PRIORITY_KEYS = range(1, 6)
"""The priority keys a default server takes: 1 runs first, 5 last; a run without one counts as 3."""
MAX_FAIRNESS_KEY_BYTES = 64
"""The longest fairness key the server takes, in UTF-8 bytes."""
FAIRNESS_WEIGHTS = (0.001, 1000.0)
"""The lowest and highest fairness weight the server takes (it clamps others); a key without one weighs 1.0."""


def priority_key_problem(key: int) -> str | None:
    """What is wrong with ``key`` as a priority key, or ``None``."""
    if key not in PRIORITY_KEYS:
        return f"the priority key must be an integer from 1 (first) to 5 (last), got {key!r}"
    return None


def fairness_key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a fairness key, or ``None``."""
    size = len(key.encode())
    if not key.strip():
        return "the fairness key must not be empty: give the tenant's id, e.g. 'tenant-42'"
    if size > MAX_FAIRNESS_KEY_BYTES:
        return (
            f"the fairness key must be at most {MAX_FAIRNESS_KEY_BYTES} bytes (UTF-8), got {size}: "
            "use a shorter tenant id, or a hash of it"
        )
    return None


def fairness_weight_problem(weight: float) -> str | None:
    """What is wrong with ``weight`` as a fairness weight, or ``None``."""
    low, high = FAIRNESS_WEIGHTS
    if not low <= weight <= high:  # a NaN fails this too
        return f"the fairness weight must be from {low:g} to {high:g}, got {weight!r}"
    return None


def checked(priority: Priority) -> Priority:
    """``priority``, once its fields are within the server's limits.

    Raises:
        InvalidRunInput: A field is out of range; the message says which and what the range is.
    """
    problems = [
        problem
        for problem in (
            None if priority.priority_key is None else priority_key_problem(priority.priority_key),
            None if priority.fairness_key is None else fairness_key_problem(priority.fairness_key),
            None if priority.fairness_weight is None else fairness_weight_problem(priority.fairness_weight),
        )
        if problem is not None
    ]
    if problems:
        raise InvalidRunInput(f"The run was not started: {'; '.join(problems)}.")
    return priority


def from_proto(proto: PriorityProto) -> Priority | None:
    """A run's priority as the server describes it (``WorkflowExecutionInfo.priority``), or ``None`` if it has none."""
    priority = Priority._from_proto(proto)
    return None if priority == Priority.default else priority
