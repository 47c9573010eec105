"""What a run leaves out of its activities' inputs, which its history holds every iteration (issue 14).

A model call's or a tool call's input names its run (for the live log, logs, spans and the tool's context), and the
activity knows that already: it is its own workflow id (``activity.info().workflow_id``). Leaving the id out saves
its bytes twice an iteration. That changes what a run sends, so it goes behind ``workflow.patched``: a run recorded
before sends the id on replay as it did.
"""

from __future__ import annotations

from temporalio import workflow

INPUTS_WITHOUT_RUN_ID_PATCH = "activity-inputs-without-run-id"
"""``workflow.patched`` id of leaving ``run_id`` out of ``CreateMessageInput`` and ``RunToolInput`` (the activity
reads its own)."""


def input_run_id() -> str:
    """The ``run_id`` of a model or tool call's input: empty (the activity reads its own), unless recorded with it."""
    return "" if workflow.patched(INPUTS_WITHOUT_RUN_ID_PATCH) else workflow.info().workflow_id
