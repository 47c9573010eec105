"""A model call's result in its lean form: what every reply says anyway is left out of the run's history (issue 14).

A model call's result is in the run's history every iteration. Since the ``lean-iteration-history`` patch
(``workflows/history_size.py``) a run asks for lean results by leaving ``length`` out of its turn
(``ModelTurn.length`` is ``None``), and the model call answers with a plain object instead of a whole
``CreateMessageOutput``:

- ``stored`` is left out (such a call always stores the turn), and ``attempt`` when it is 1;
- the reply's ``type`` (``"message"``), ``role`` (``"assistant"``), ``stop_sequence`` (``null``) and
  ``stop_reason`` when it is ``"tool_use"`` are left out (its ``model`` stays: another model may have served it);
- a reply that does not come back whole from that (a field missing that the run would put back) is sent as it is,
  with ``as_is``.

The run puts it all back (``full_output``) before anything reads the reply, so the reply it records, names
(``message_ref``) and returns is the one the call stored; ``agent_runner/gc.py`` reads the history the same way.
Pure JSON work: workflow code imports it.
"""

from __future__ import annotations

from typing import Any

from agent_runner.contract.types import CreateMessageOutput

_CONSTANTS: dict[str, Any] = {"type": "message", "role": "assistant", "stop_reason": "tool_use", "stop_sequence": None}
"""Fields every reply carries, and their values in a reply the run goes on from."""

AS_IS = "as_is"
"""The key of a lean result whose reply is whole: nothing to put back."""


def lean_reply(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` without the fields ``full_reply`` puts back."""
    return {key: value for key, value in message.items() if key not in _CONSTANTS or value != _CONSTANTS[key]}


def full_reply(lean: dict[str, Any]) -> dict[str, Any]:
    """The reply ``lean_reply`` was given: the fields it left out put back."""
    return {**_CONSTANTS, **lean}


def lean_output(message: dict[str, Any], attempt: int, opening_usage: dict[str, Any] | None) -> dict[str, Any]:
    """A model call's result for a run that asked for it lean (the JSON ``full_output`` reads)."""
    lean = lean_reply(message)
    output: dict[str, Any] = {"message": lean}
    if full_reply(lean) != message:
        output = {"message": message, AS_IS: True}  # a field the run would add is missing: send it whole
    if attempt != 1:
        output["attempt"] = attempt
    if opening_usage is not None:
        output["opening_usage"] = opening_usage
    return output


def full_output(output: CreateMessageOutput) -> CreateMessageOutput:
    """A lean result (parsed as ``CreateMessageOutput``) as the call's whole result: stored, its reply whole."""
    message = output.message if output.as_is else full_reply(output.message)
    return output.model_copy(update={"message": message, "stored": True, "attempt": output.attempt or 1})


def full_output_json(output: dict[str, Any]) -> dict[str, Any]:
    """A lean result's JSON as the whole result's JSON (for readers of a run's history, such as ``gc``)."""
    message = output.get("message")
    if isinstance(message, dict) and not output.get(AS_IS):
        message = full_reply(message)
    return {**output, "message": message, "stored": True, "attempt": output.get("attempt") or 1}
