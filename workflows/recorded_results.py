"""A what-if run answers a tool call with a result another run recorded for the same call (``recorded_results``).

Calls are the same when their tool and their input, as JSON, are: the results recorded for one call are given in the
order the run they come from got them, each once (``RunState.recorded_used`` notes those given, across
continue-as-new), so a call that run made twice with two results gets both, in turn, before it runs. Plain JSON input
(the stock CLI's) is held as the run's messages are (``plain_json.py``), so the same call matches whoever sent it.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.recorded_results import call_key, refused_text
    from agent_runner.contract.types import ToolResult
    from agent_runner.workflows.plain_json import as_held

if TYPE_CHECKING:
    from agent_runner.workflows.run_view import RunView


class RecordedResults:
    """The results a run's input recorded, given out in order."""

    def __init__(self, run: RunView) -> None:
        self._run = run
        self._by_call: dict[tuple[str, str], list[int]] | None = None
        """Each call's entries in ``recorded_tool_results``, by ``call_key``; built on the first call."""

    @property
    def active(self) -> bool:
        """Whether the run answers calls from a record, or refuses those it cannot (``unrecorded_tool_calls``)."""
        spec = self._run.spec
        return spec is not None and (bool(spec.recorded_tool_results) or spec.unrecorded_tool_calls != "run")

    def answer(self, name: str, tool_input: Any) -> ToolResult | None:
        """The result for a call of ``name`` with ``tool_input``, if the run takes it from a record; else ``None``.

        A call nothing recorded (any more) gets ``None`` (it runs), or in a run whose ``unrecorded_tool_calls`` is
        ``"refuse"`` an error result saying why.
        """
        spec = self._run.spec
        if spec is None or not self.active:
            return None
        if self._by_call is None:
            self._by_call = {}
            for number, entry in enumerate(spec.recorded_tool_results):
                key = call_key(entry.name, as_held(entry.input, spec.held))
                self._by_call.setdefault(key, []).append(number)
        used = self._run.state.recorded_used
        for number in self._by_call.get(call_key(name, tool_input), []):
            if number not in used:
                used.append(number)
                entry = spec.recorded_tool_results[number]
                return ToolResult(content=as_held(entry.content, spec.held), is_error=entry.is_error)
        if spec.unrecorded_tool_calls == "refuse":
            return ToolResult(content=refused_text(name), is_error=True)
        return None
