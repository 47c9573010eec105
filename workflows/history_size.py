"""What a run leaves out of its activities' inputs, which its history holds every iteration (issue 14).

A model call's or a tool call's input names its run (for the live log, logs, spans and the tool's context), and the
activity knows that already: it is its own workflow id (``activity.info().workflow_id``). Leaving the id out saves
its bytes twice an iteration. That changes what a run sends, so it goes behind ``workflow.patched``: a run recorded
before sends the id on replay as it did.

Since ``LEAN_HISTORY_PATCH`` a model call's turn leaves out ``length`` (the call counts the stored messages itself),
which asks the call for a lean result (``agent_runner/contract/lean.py``): what every reply says anyway (``stored``,
``attempt`` 1, the reply's ``type``, ``role``, ``stop_sequence: null``, ``stop_reason: tool_use``) stays out of the
history, and the text and thinking blocks over ``RESULT_INLINE_LIMIT`` of a reply the run goes on from (``tool_use``,
``pause_turn``) are stored apart, as tool results are, so a long reply costs the history a placeholder. What such a
call stores it names by short references (``contract/transcript.py``, ``SHORT_PREFIX``): 23 characters instead of
71, and an iteration carries six of them. The run puts the reply back whole (``whole_output``) before reading it.

Since ``COMPACT_RESULTS_PATCH`` (the newest umbrella, ``patches.py``) a lean turn sends the tool results that end its
pending messages compact (``contract/tool_result_refs.py``): a stored result costs its id and reference, not a whole
``tool_result`` message. The model call puts the message back before it reads the turn.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.lean import full_output
    from agent_runner.contract.tool_result_refs import compact_turn
    from agent_runner.contract.transcript import Transcript, canonical, ref_for
    from agent_runner.contract.types import CreateMessageOutput, ModelTurn, idempotency_key

from agent_runner.workflows.patches import compact_results, since

INPUTS_WITHOUT_RUN_ID_PATCH = "activity-inputs-without-run-id"
"""``workflow.patched`` id of leaving ``run_id`` out of ``CreateMessageInput`` and ``RunToolInput`` (the activity
reads its own)."""


def input_run_id() -> str:
    """The ``run_id`` of a model or tool call's input: empty (the activity reads its own), unless recorded with it."""
    return "" if since(INPUTS_WITHOUT_RUN_ID_PATCH) else workflow.info().workflow_id


def input_idempotency_key(tool_use_id: str) -> str:
    """The ``idempotency_key`` of a tool call's input: empty where the activity derives the same key itself.

    The key hashes the run chain's first run id (``idempotency_key``): in a run's first execution that is the
    activity's own ``workflow_run_id``, so only a continuation sends it. (No patch: the key is the same either way,
    and a run recorded with its run id in its inputs sends its key, as its activities read it.)
    """
    info = workflow.info()
    if input_run_id() == "" and info.run_id == info.first_execution_run_id:
        return ""
    return idempotency_key(info.first_execution_run_id, tool_use_id)


LEAN_HISTORY_PATCH = "lean-iteration-history"
"""``workflow.patched`` id of lean model calls: the turn without ``length``, the result lean (``contract/lean.py``)."""


def lean_turn(turn: ModelTurn, transcript: Transcript) -> tuple[ModelTurn, bool]:
    """``turn`` as this run sends it, and whether its call answers lean (not for runs recorded before the patch).

    A lean call names what it stores by short references (``SHORT_PREFIX``), its settings included, and so does
    ``transcript`` from now on.
    """
    if not since(LEAN_HISTORY_PATCH):
        return turn, False
    transcript.short_refs = True
    update: dict[str, Any] = {"length": None}
    if turn.length is not None and turn.answered == turn.length - len(turn.pending):
        update["answered"] = None  # the thread holds every stored message, which the call counts
    if turn.settings is not None:
        update["settings_ref"] = ref_for(canonical(turn.settings), short=True)
    lean = turn.model_copy(update=update)
    return (compact_turn(lean) if compact_results() else lean), True


def turn_summary(reply_number: int, model: object, run_model: object, lean: bool) -> str:
    """A model call's summary in the Temporal UI: its turn, and its model unless it is the run's own.

    In a lean run the run's model is left out: every call's summary would say again what its input says once.
    """
    return f"turn {reply_number}" if lean and model == run_model else f"turn {reply_number} · {model}"


def whole_output(output: CreateMessageOutput, lean: bool) -> CreateMessageOutput:
    """The call's result as the run reads it: a lean one put back whole (``full_output``)."""
    return full_output(output) if lean else output
