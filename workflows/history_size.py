"""What a run leaves out of its model calls' inputs, which its history holds once per iteration (issue 14).

A model call's input names the run only to say whose live log its stream goes to, and the activity knows that
already: it is its own workflow id (``activity.info().workflow_id``). Leaving the id out saves its bytes in every
iteration's history. That changes what a run sends, so it goes behind ``workflow.patched``: a run recorded before
sends the id on replay as it did.
"""

from __future__ import annotations

from temporalio import workflow

MODEL_CALL_RUN_ID_PATCH = "model-call-input-without-run-id"
"""``workflow.patched`` id of leaving ``run_id`` out of ``CreateMessageInput`` (the activity reads its own)."""


def model_call_run_id() -> str:
    """The ``run_id`` of a model call's input: empty (the activity's own workflow id), unless recorded with it."""
    return "" if workflow.patched(MODEL_CALL_RUN_ID_PATCH) else workflow.info().workflow_id
