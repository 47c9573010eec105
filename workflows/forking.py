"""A fork runs the tools its run had at the fork point (issue 13), not only those its input named.

``Run.fork`` starts a new run from a run's request for one reply. That history may announce tools ``add_tools`` gave
the run (``tool_addition`` system messages), which Claude is then free to call: the fork must run them, as the run
did, and must not run one a raw definition replaced (sent, never run, as in the SDK). So the run notes its runnable
tools each time an edit changes them (``RunState.tools_from``: from which reply number on, which names), the fork
point answers the names for its reply (``ForkedFrom.tools``), and the fork runs those instead of its input's. The
tools the request names stay the input's, so the fork's first request is the run's request for that reply, byte for
byte. Tools withdrawn before the fork point are withdrawn by the history itself (``tool_removal``), as in any run.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_runner.contract.forking import ForkedFrom as ForkedFrom
from agent_runner.contract.forking import forked_from_problems as forked_from_problems
from agent_runner.workflows.patches import implied

if TYPE_CHECKING:
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.workflows.state import RunState

FORK_TOOLS_PATCH = "fork-runs-its-tools"
"""A fork runs the tools its run had at the fork point; asked only by a run whose input says which."""


def note_tools(state: RunState) -> None:
    """Note the run's runnable tools, changed by an edit at this boundary, for the replies from the next one on."""
    state.tools_from[state.reply_count + 1] = [name for name, tool in state.tools.items() if tool.mcp is None]


def tools_at(state: RunState, iteration: int, started_with: list[str] | None) -> list[str] | None:
    """The registered tools the run could run when it sent its request for reply ``iteration``.

    Args:
        state: The run's state.
        iteration: A reply number.
        started_with: The tools the run started with when its input did not name them (a send's or a fork's).

    Returns:
        Their names; ``None`` when they are the ones the run's input names.
    """
    noted = [number for number in state.tools_from if number <= iteration]
    return state.tools_from[max(noted)] if noted else started_with


def started_with(spec_input: dict[str, Any]) -> list[str] | None:
    """The tools a run started with when its input did not name them: a send's or a fork's (raw input)."""
    for key in ("continue_from", "forked_from"):
        point = spec_input.get(key)
        if isinstance(point, dict) and point.get("tools") is not None:
            return list(point["tools"])
    return None


def carried_tools_from(state: RunState, fork_offset: int) -> dict[int, list[str]]:
    """``tools_from`` across continue-as-new: what the fork points still held (after ``fork_offset``) need."""
    older = [number for number in state.tools_from if number <= fork_offset + 1]
    first = max(older) if older else None
    return {n: names for n, names in state.tools_from.items() if first is None or n >= first}


def forked_tools(spec: RunSpec) -> list[str] | None:
    """The tools a forked run runs, when its fork point said (``None``: its input's, as any run's)."""
    if spec.forked_from is None or spec.forked_from.tools is None or not implied(FORK_TOOLS_PATCH):
        return None
    return spec.forked_from.tools


def keep_only(state: RunState, runnable: list[str]) -> None:
    """Run only ``runnable`` of the registered tools (after the request's definitions were taken from them all)."""
    for name in [n for n, tool in state.tools.items() if tool.mcp is None and n not in runnable]:
        state.tools.pop(name)
