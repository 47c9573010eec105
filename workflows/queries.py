"""The run's queries, answered from what the run keeps: status, fork and send points, replies, transcript.

``AgentRun``'s query handlers forward here. A query changes nothing and issues no command; a refusal is a
``ValueError`` whose message says what to do instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.big_params import read_by_fallbacks
    from agent_runner.contract.transcript import Transcript
    from agent_runner.contract.types import RunStatus
    from agent_runner.workflows.carry import sent_conversation
    from agent_runner.workflows.continuation import send_point
    from agent_runner.workflows.forking import ForkedFrom, started_with, tools_at

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


REFUSED_EDITS_SHOWN = 5
"""How many of the edits that could not apply the status names (the newest): each says why, to its sender."""


def status_of(run: RunView) -> RunStatus:
    """The run's state: status, iterations, usage, transcript version and pending approvals (``STATUS_QUERY``)."""
    state, spec = run.state, run.spec
    last = state.last_reply
    return RunStatus(
        status=run.current_status,
        iterations=state.iterations,
        replies=state.reply_count,
        stop_reason=last.get("stop_reason") if last else None,
        usage=state.usage,
        transcript_length=len(state.conversation.transcript) if state.conversation else 0,
        version=state.version,
        pending_approvals=run.approvals.waiting(),
        refused_edits=[
            outcome.model_dump(exclude_none=True, exclude={"version"})
            for seq, outcome in sorted(state.outcomes.items())
            if outcome.error is not None
        ][-REFUSED_EDITS_SHOWN:],
        stop_reason_detail=state.stop,
        cost_usd=spec.budget.prices.cost(state.usage) if spec and spec.budget.prices else None,
        budget_left=spec.budget.left_in_words(state.usage, state.started_at, workflow.now()) if spec else None,
        tool_results_under_review=run.steps.under_review,
        replies_head=state.replies_head,
        reply_offset=state.reply_offset,
        continuations=state.continuations,
        agents=[child.model_dump() for child in state.children],
        sleeping_until=run.tool_calls.sleeps.sleeping_until(),
    )


def fork_point_of(run: RunView, iteration: int) -> dict[str, Any]:
    """What a new run whose first request is this run's request for ``iteration`` (1 is the first) starts from.

    ``iteration`` is a reply number: compactions count (and cannot be forked from).

    Returns:
        ``{"input": …, "head": …}``: this run's input, and the head of the history Claude saw then (in the store).
    """
    state = run.state
    total = state.fork_offset + len(state.fork_points)
    if not 1 <= iteration <= total:
        raise ValueError(f"Iteration {iteration} does not exist; the run has {total} replies.")
    if iteration <= state.fork_offset:
        raise ValueError(
            f"Iteration {iteration} is too old to fork from this run (it continued as new since); fork from "
            f"iteration {state.fork_offset + 1} or later, or start a run from the transcript."
        )
    head = state.fork_points[iteration - state.fork_offset - 1]
    if head is None:
        raise ValueError(
            f"Iteration {iteration} cannot be forked: it is a compaction, or the run started before transcripts "
            "were stored. Fork from another iteration, or start a run from the transcript."
        )
    conversation = state.conversation
    # A continuation whose input left its big parameters to the carried conversation forks with those.
    params = conversation.params if conversation is not None and state.input_trimmed else {}
    # A fork starts from the history at `head`, which holds what a `send` continued from, and runs the tools this
    # run could run then (`forking.py`).
    own_input = {k: v for k, v in run.run_input.items() if k not in ("continue_from", "forked_from")}
    tools = tools_at(state, iteration, started_with(run.run_input))
    forked = ForkedFrom(run_id=workflow.info().workflow_id, iteration=iteration, tools=tools)
    return {"input": {**params, **own_input, "forked_from": forked.model_dump(mode="json")}, "head": head}


def send_point_of(run: RunView) -> dict[str, Any]:
    """What a new run that goes on with this ended run's conversation starts from (``Run.send``).

    Returns:
        ``{"input": …, "continue_from": …}``: this run's input (with the budget a person approved, if one did), and
        its ``continue_from`` (``continuation.py``).
    """
    state = run.state
    if not run.ended:
        raise ValueError(
            f"The run is still {run.current_status}: send it a message with `inject` instead, or wait for it to end."
        )
    if state.conversation is None:
        raise ValueError("The run ended before it had a conversation; start a new run instead.")
    params = state.conversation.params if state.input_trimmed else {}
    left_out = ("messages", "continue_from", "forked_from")
    run_input = {k: v for k, v in {**params, **run.run_input}.items() if k not in left_out}
    if state.budget is not None:  # what a person approved, not the input's spent budget
        run_input["budget"] = state.budget.model_dump(mode="json", exclude_defaults=True)
    conversation = sent_conversation(state, read_by_fallbacks(run.run_input.get("refusal_fallbacks")))
    point = send_point(workflow.info().workflow_id, conversation, state.usage, state.fallback_index, state.tools)
    return {"input": run_input, "continue_from": point}


def replies_after(run: RunView, after: int) -> list[dict[str, Any]]:
    """Claude's replies, whole (id, content, stop reason, usage), from reply number ``after + 1`` on."""
    state = run.state
    if after < state.reply_offset:
        raise ValueError(
            f"Replies before iteration {state.reply_offset + 1} are no longer held by the run (it continued as "
            "new); read them from the store (`replies_head` in the status), as AgentRunner does."
        )
    return state.replies[after - state.reply_offset :]


def transcript_of(run: RunView) -> dict[str, Any]:
    """The whole conversation, by reference, and its version.

    Returns:
        ``{"version", "head", "pending", "length"}``: the messages are those of the transcript ``head`` in the
        store, then ``pending``, in the Messages API's wire shape once placeholders are resolved
        (``AgentRunner`` does both).
    """
    conversation = run.state.conversation
    transcript = conversation.transcript if conversation else Transcript()
    return {
        "version": run.state.version,
        "head": transcript.head,
        "pending": transcript.pending,
        "length": len(transcript),
    }
