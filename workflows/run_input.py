"""The run's input, as the workflow reads it: checked once when the run starts.

The types and their check are the contract's (``agent_runner/contract/run_input.py``), so the client runs the same
check before it starts a run; the workflow imports them from here.
"""

from agent_runner.contract.run_input import RunSpec as RunSpec
from agent_runner.contract.run_input import inline_tools_problems as inline_tools_problems
from agent_runner.contract.run_input import late_problems as late_problems
from agent_runner.contract.run_input import parse_run_input as parse_run_input

LATE_INPUT_CHECKS_PATCH = "late-input-checks"
"""``workflow.patched`` id, asked only of a new run whose input the later checks refuse (``late_problems``): the
marker makes its replay fail it again, while a run in flight started with such input (no marker) goes on with it."""
