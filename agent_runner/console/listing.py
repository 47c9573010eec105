"""The console's list of runs, from Temporal's visibility store in one listing, and runs waiting for approval asked.

A run whose workers keep the ``AgentRun*`` search attributes current (``--search-attributes``;
``workflows/search_attributes.py``) shows its own status, what it waits for and its turns, as of its last workflow
task; the list filters on ``AgentRunWaiting`` in the listing itself. A run without them shows Temporal's word for
it (``running``) and a note saying how to get more: asking each run in turn would make the list cost a query per run,
each one a workflow task a worker must replay, and hang on runs no worker serves.

Only the rows waiting for ``approval`` are asked something (``with_approval_tools``): which tools they wait for, which
no search attribute says. The first ``APPROVALS_ASKED`` of them are asked together, each for at most
``APPROVALS_TIMEOUT`` seconds, and a row whose run does not answer in time still says ``approval``; the rest say
``approval`` with a note to open them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from agent_runner.client import LISTED_RUNS, STATUS_ATTRIBUTE, AgentRunner, listed_status
from agent_runner.contract.errors import AgentRunError, AgentRunnerError

WAITING_FOR = {
    "waiting_for_approval": "approval",
    "waiting_for_step": "step",
    "waiting_for_review": "review",
    "sleeping": "sleep",
}
"""What a run in each waiting status waits for, as the list shows and filters it (``AgentRunWaiting``'s values)."""

WAITING = SearchAttributeKey.for_keyword("AgentRunWaiting")
ITERATIONS = SearchAttributeKey.for_int("AgentRunIterations")

APPROVALS_TIMEOUT = 2.0
"""Seconds a row waiting for approval waits for its run to say which tools (a run no worker serves never answers)."""

APPROVALS_ASKED = 20
"""How many rows waiting for approval the list asks which tools (the newest): each costs a query, a workflow task."""

UNASKED_NOTE = "open it to see which tools it waits for"
"""The note of a row waiting for approval beyond the first ``APPROVALS_ASKED``, whose run the list did not ask."""

NO_ATTRIBUTES_NOTE = "its workers keep no search attributes (--search-attributes): open it to see what it waits for"


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def visibility_query(*, task_queue: str | None, waiting: str | None) -> str:
    """The listing's visibility query.

    Args:
        task_queue: Only runs on this task queue, or all.
        waiting: Only running runs waiting for this (``approval``, ``step``, ``review``, ``sleep``), ``any`` of
            them, or ``None`` for every run.
    """
    clauses = [LISTED_RUNS]
    if task_queue:
        clauses.append(f"TaskQueue = {_quoted(task_queue)}")
    if waiting is not None:
        kinds = list(WAITING_FOR.values()) if waiting == "any" else [waiting]
        clauses.append("ExecutionStatus = 'Running'")  # a closed run keeps the attribute it had, waits for nothing
        clauses.append(f"AgentRunWaiting IN ({', '.join(map(_quoted, kinds))})")
    return " AND ".join(clauses)


def row(execution: WorkflowExecution) -> dict[str, Any]:
    """One line of the list, from what Temporal's visibility store holds of the run.

    ``tools`` (the names of the tool calls waiting for approval) is ``None`` here: ``with_approval_tools`` asks.
    """
    attributes = execution.typed_search_attributes
    own = attributes.get(STATUS_ATTRIBUTE)
    running = execution.status in (None, WorkflowExecutionStatus.RUNNING)
    waiting = attributes.get(WAITING) if running else None
    return {
        "id": execution.id,
        "status": listed_status(execution),
        "start_time": execution.start_time.isoformat(),
        "close_time": execution.close_time.isoformat() if execution.close_time else None,
        "waiting": waiting or None,
        "tools": None,
        "iterations": attributes.get(ITERATIONS),
        "note": NO_ATTRIBUTES_NOTE if running and own is None else None,
    }


async def list_rows(client: Client, *, task_queue: str | None, waiting: str | None, limit: int) -> list[dict[str, Any]]:
    """Runs, newest first, as lines of the list.

    Raises:
        AgentRunError: Temporal refused the listing; when it filters on what runs wait for, most likely because the
            namespace does not have the ``AgentRun*`` search attributes.
    """
    query = visibility_query(task_queue=task_queue, waiting=waiting)
    try:
        return [row(execution) async for execution in client.list_workflows(query, limit=limit)]
    except RPCError as e:
        hint = (
            " Filtering on what runs wait for needs the AgentRun* search attributes: register them (`temporal "
            "operator search-attribute create --name AgentRunWaiting --type Keyword`, and the others of "
            "agent_runner.contract.types.SEARCH_ATTRIBUTE_TYPES) and start workers with --search-attributes."
            if waiting is not None
            else ""
        )
        raise AgentRunError(f"Temporal refused to list runs: {e.message}.{hint}") from e


async def _waiting_tools(runner: AgentRunner, run_id: str, timeout: float) -> list[str] | None:
    """The names of the run's tool calls waiting for approval, in order, or ``None`` if it did not say in time."""
    try:
        async with asyncio.timeout(timeout):
            pending = await runner.attach(run_id).pending_approvals()
    except (TimeoutError, AgentRunnerError):
        return None  # no worker serves it, or it ended meanwhile: the row still says "approval"
    return [approval.name for approval in pending]


async def with_approval_tools(
    runner: AgentRunner, rows: list[dict[str, Any]], *, timeout: float = APPROVALS_TIMEOUT
) -> list[dict[str, Any]]:
    """The rows, each waiting for ``approval`` with ``tools`` set to the tools its run waits for, when it said.

    Only the first ``APPROVALS_ASKED`` of those rows' runs are asked (the ``pending_approvals`` query), all at once,
    each for at most ``timeout`` seconds: the list costs at most that many queries, and never more than ``timeout``
    in all. The others get ``UNASKED_NOTE`` (their page says which tools).
    """
    waiting = [r for r in rows if r["waiting"] == WAITING_FOR["waiting_for_approval"]]
    asking, unasked = waiting[:APPROVALS_ASKED], waiting[APPROVALS_ASKED:]
    answers = await asyncio.gather(*(_waiting_tools(runner, r["id"], timeout) for r in asking))
    for r, tools in zip(asking, answers, strict=True):
        r["tools"] = tools
    for r in unasked:
        r["note"] = UNASKED_NOTE
    return rows
