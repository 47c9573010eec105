"""A query replays the run: a worker without the run in its cache answers from the history alone, always.

A query of an ended run (or of a run no worker holds) is answered by a worker that replays the whole history first,
so any difference between what a run did and what its code does on replay fails the query with a non-determinism
error instead of answering. The runs here exercise what changes a run's commands on replay: the ``workflow.patched``
markers (with the ``TemporalChangeVersion`` upsert Temporal adds to each), the ``AgentRun*`` search attributes a run
publishes, approvals, step mode, a stop and sub-agents. Each is queried while it waits (on the worker that runs it,
then on a fresh worker that keeps nothing cached) and after it ended on a fresh worker, and its history replays on a
``Replayer``. ``test_no_command_is_reachable_from_a_query_validator_or_predicate`` keeps the code that may emit a
command out of the handlers that must not.

Before ``AgentRun`` published its search attributes only from its own event loop, these runs failed their replay now
and then (more often after other test files in the same process): a coroutine of a run evicted earlier, closed by the
garbage collector while another run's workflow task ran, upserted that run's status into the other run's history.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_runner.client import AgentRunner, Run
from agent_runner.contract.types import RunStatus
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.worker import WorkerTuning
from agent_runner.workflows.agent_run import AgentRun
from tests import subagent_support as sub
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, delete_file, wait_status
from tests.test_layers import ROOT

pytestmark = pytest.mark.usefixtures("fresh_tools")

USER = {"role": "user", "content": "Clean up the temp files."}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}


def delete_call(path: str = "/tmp") -> Reply:
    return Reply([text("Deleting."), tool_use("toolu_D", "delete_file", {"path": path})], "tool_use")


@asynccontextmanager
async def fresh_worker(worker: WorkerFactory, *tools: Any) -> AsyncIterator[None]:
    """A worker that keeps no run cached: every task it takes, a query's included, replays the run's history."""
    async with worker(*tools, search_attributes=True, tuning=WorkerTuning(max_cached_workflows=0)):
        yield


async def replays(run: Run) -> None:
    """The run's history replays on the current code as workers run it (outside the sandbox).

    Not in the strict sandbox (``tests/test_replay.py``): there, the first replay of such a history in a process
    where a worker already ran runs has been seen to order an upsert before an update's completion (issue: the
    report of helper-nde); the same history replays cleanly right after, in and out of the sandbox.
    """
    history = await run.handle.fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, str(result.replay_failure)


async def answered_after_the_end(worker: WorkerFactory, run: Run, *tools: Any) -> RunStatus:
    """The run's status, replies and transcript as a fresh worker answers them once the run ended."""
    async with fresh_worker(worker, *tools):
        status = await run.status()
        assert len([m async for m in run.messages()]) == status.replies
        assert len(await run.transcript()) == status.transcript_length
    await replays(run)
    return status


async def test_a_completed_run_that_published_its_search_attributes_answers_a_fresh_worker(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(end_turn("Nothing to do."))
    async with worker(search_attributes=True):
        run = await runner.start(**BASE)
        await run.until_done()
    status = await answered_after_the_end(worker, run)
    assert (status.status, status.iterations, status.replies) == ("completed", 1, 1)


async def test_a_run_approved_on_another_worker_answers_while_it_waits_and_after_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(delete_call(), end_turn("Deleted."))
    async with worker(delete_file, search_attributes=True):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        assert (await run.status()).pending_approvals[0]["tool_use_id"] == "toolu_D"  # the worker that holds it
    async with fresh_worker(worker, delete_file):
        # Between workflow tasks, on a worker that replays the run to answer, then goes on with it.
        status = await run.status()
        assert (status.status, status.replies, [a["tool_use_id"] for a in status.pending_approvals]) == (
            "waiting_for_approval",
            1,
            ["toolu_D"],
        )
        await run.approve("toolu_D", input={"path": "/tmp/x.tmp"})
        await run.until_done()
    assert CALLS == ["delete /tmp/x.tmp"]
    status = await answered_after_the_end(worker, run, delete_file)
    assert (status.status, status.iterations, status.replies, status.pending_approvals) == ("completed", 2, 2, [])


async def test_a_run_in_step_mode_answers_while_paused_and_after_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(delete_call(), end_turn("Deleted."))
    async with worker(delete_file, search_attributes=True):
        run = await runner.start(**BASE, tools=[delete_file], step={"review_results": True})
        await wait_status(run, "waiting_for_step", 1)
    async with fresh_worker(worker, delete_file):
        assert (await run.status()).status == "waiting_for_step"
        await run.advance(iteration=1)
        await wait_status(run, "waiting_for_review", 1)
        await run.advance(iteration=1)
        await wait_status(run, "waiting_for_step", 2)
        await run.advance(iteration=2)
        await run.until_done()
    status = await answered_after_the_end(worker, run, delete_file)
    assert (status.status, status.iterations, status.tool_results_under_review) == ("completed", 2, None)


async def test_a_run_stopped_while_it_waits_answers_after_it_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(delete_call())
    async with worker(delete_file, search_attributes=True):
        run = await runner.start(**BASE, tools=[delete_file], approval={"tools": ["delete_file"]})
        await wait_status(run, "waiting_for_approval")
        await run.stop("Not today.")
        await run.result()
    status = await answered_after_the_end(worker, run, delete_file)
    assert (status.status, status.stop_reason_detail) == ("stopped", "Not today.")
    assert CALLS == []


async def test_a_parent_and_its_sub_agent_answer_a_fresh_worker_after_they_ended(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.responder = sub.by_system(
        [sub.research("toolu_P1", "Look."), end_turn("Done.")], lambda _body: end_turn("Sunny.")
    )
    async with worker(search_attributes=True):
        run = await runner.start(
            **sub.BASE, messages=[sub.USER], thread=False, agents=[{**sub.RESEARCHER, "tools": []}]
        )
        await run.until_done()
    status = await answered_after_the_end(worker, run)
    assert (status.status, status.iterations, [a["status"] for a in status.agents]) == ("completed", 2, ["completed"])
    child = await answered_after_the_end(worker, run.child("toolu_P1"))
    assert (child.status, child.iterations) == ("completed", 1)


# --- What may run where -------------------------------------------------------------------------------------------

COMMANDS = frozenset(
    {
        "patched",
        "deprecate_patch",
        "upsert_search_attributes",
        "upsert_memo",
        "execute_activity",
        "start_activity",
        "execute_local_activity",
        "start_local_activity",
        "execute_child_workflow",
        "start_child_workflow",
        "continue_as_new",
        "wait_condition",
    }
)
"""The workflow calls that add a command (or a marker, or an upsert): each must run at the same point of the run on
replay, so never in a query handler, an update validator or a ``wait_condition`` predicate (Temporal refuses them in
the first two; a predicate runs whenever the SDK checks its conditions, which a replaying worker does at other
points)."""


def _calls(node: ast.AST) -> set[str]:
    """The simple names ``node`` calls: ``f(...)`` and ``x.f(...)`` both as ``f``."""
    names = set()
    for sub_node in ast.walk(node):
        if isinstance(sub_node, ast.Call):
            func = sub_node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _is_root(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A query handler or an update validator."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and (
            target.attr == "validator" or (target.attr == "query" and getattr(target.value, "id", None) == "workflow")
        ):
            return True
    return False


def test_no_command_is_reachable_from_a_query_validator_or_predicate() -> None:
    """By name, over every function of ``workflows/``: an over-approximation, so a false alarm names its path."""
    functions: dict[str, set[str]] = {}
    roots: dict[str, ast.AST] = {}
    for path in sorted((ROOT / "workflows").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.setdefault(node.name, set()).update(_calls(node) - {node.name})
                if _is_root(node):
                    roots[f"{path.stem}.{node.name}"] = node
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "wait_condition"
                and node.args
            ):
                roots[f"{path.stem}:{node.lineno} wait_condition predicate"] = node.args[0]
    found = []
    for root, node in roots.items():
        # A predicate that names a function (`workflow.all_handlers_finished`) calls it.
        start = _calls(node) | ({node.attr} if isinstance(node, ast.Attribute) else set())
        paths = {name: [name] for name in start}
        todo = list(start)
        while todo:
            name = todo.pop()
            if name in COMMANDS:
                found.append(f"{root} -> {' -> '.join(paths[name])}")
                continue
            for callee in functions.get(name, ()):
                if callee not in paths:
                    paths[callee] = [*paths[name], callee]
                    todo.append(callee)
    assert found == []
    assert len(roots) > 20  # the walk saw the handlers: 7 queries, 13 validators, the predicates
