"""Which request shape a run sends where anthropic 2.14.0's tool runner sends another than runs recorded before.

Two fields differed (``tests/test_parity.py`` pins both against the SDK):

- ``tools``: the SDK's runner always has a tool list, so a ``create`` (and every turn without a thread) sends
  ``"tools": []`` when it is empty; a run without tools left the field out;
- ``anthropic-beta``: the SDK appends the threads beta to the caller's ``betas`` and its refusal-fallback middleware
  appends ``fallback-credit-2026-07-01`` after that unless the caller gave it; a run put the threads beta before that
  beta wherever it was, so a caller's own ``fallback-credit`` beta came out after the threads beta.

A run begun on the code of ``COMPACT_RESULTS_PATCH`` sends the SDK's shape without asking (that umbrella implies
this patch: ``patches.implied``). Any other run decides once, at the first turn that would differ
(``Conversation.sends_otherwise_than_before``), and keeps the answer in ``Conversation.sdk_request_shape``. Asked
only there, the patch marker is recorded only by runs that differ, and a run recorded before replays its ``False``
and goes on sending what it sent: the SDK user who started it saw the run's requests so far, and no SDK runner
changes its request shape mid-way either. The body is built by the model call (``build_request``), from the settings
the turn carries, so the choice must be the workflow's, not the activity's: an activity cannot tell an old run from
a new one.

A run whose first turn differs decides before its tools are looked up (``decide_before_the_first_turn``): that lookup
is a local activity, and a patch asked right after one is not always known on replay. When the local activity outlives
its workflow task, the code after it runs in the next task, which records the marker; a replay resolves the local
activity from its marker, in the task before, and asks the patch before it was told of that marker: ``False``, and a
non-determinism error. A later turn follows a model call or a tool (regular activities), so asking there is safe, but
for one case: an edit boundary that looks up a tool ``add_tools`` names (the same local activity) and, in the same
boundary, an ``update_params`` that gives a run with tools a fallback-credit beta of its own on a thread.

Two known limits, both only for runs begun before this code: a run that continued as new before the upgrade carries
no answer, so it decides at its next turn that differs (it sends the SDK's shape from there on), and a ``send`` of such
a run decides as a new run does.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.contract.types import FALLBACK_CREDIT_BETA, MESSAGE_THREADS_BETA
    from agent_runner.workflows.patches import implied

SDK_REQUEST_SHAPE_PATCH = "request-shape-as-the-sdk"
"""``workflow.patched`` id of sending ``tools: []`` and the threads beta right after the run's own ``betas``, as the
SDK's tool runner does."""


def take_sdk_request_shape(conversation: Conversation, compaction: bool = False) -> None:
    """Decide, at the first turn whose request would differ, whether the run sends the SDK's request shape.

    Args:
        conversation: The run's conversation; its ``sdk_request_shape`` is set once and kept.
        compaction: Whether the turn is a compaction request (a ``create`` with the whole history).
    """
    if conversation.sdk_request_shape is None and conversation.sends_otherwise_than_before(compaction):
        conversation.sdk_request_shape = implied(SDK_REQUEST_SHAPE_PATCH)


def decide_before_the_first_turn(spec: RunSpec) -> bool | None:
    """The answer for a new run whose first turn differs, asked before anything else the run does; else ``None``.

    A new run's first turn is a ``create`` (or a turn without a thread), with the tools its input names (an MCP
    server's are listed by an activity later, so a run naming one decides at its first turn, which comes after that
    activity). A ``send`` goes on from the ended run's conversation, and with its answer when it had one.
    """
    if spec.continue_from is not None:
        carried = spec.continue_from.conversation
        if carried.sdk_request_shape is not None or not carried.sends_otherwise_than_before():
            return carried.sdk_request_shape
        return implied(SDK_REQUEST_SHAPE_PATCH)
    betas = spec.params.get("betas") or []
    without_tools = not spec.tools and not spec.mcp
    if without_tools or (spec.thread and FALLBACK_CREDIT_BETA in betas and MESSAGE_THREADS_BETA not in betas):
        return implied(SDK_REQUEST_SHAPE_PATCH)
    return None
