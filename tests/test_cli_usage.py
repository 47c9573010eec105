"""`agent-runner` usage mistakes are refused up front (exit 2) with the usage of the command that was mistyped."""

from __future__ import annotations

import pytest

from agent_runner import cli

CANCEL_USAGE = (
    "usage: agent-runner cancel [-h] [--task-queue TASK_QUEUE] [--wait SECONDS]\n                           RUN_ID\n"
)


@pytest.mark.parametrize("seconds", ["-5", "0", "nan", "inf", "soon"])
async def test_cancel_wait_takes_only_a_positive_finite_number_of_seconds(
    capsys: pytest.CaptureFixture[str], seconds: str
) -> None:
    """``--wait -5`` would say the run had not stopped after -5 s; ``nan`` and ``inf`` would never time out."""
    assert await cli.amain(["cancel", "r", "--wait", seconds]) == 2
    assert capsys.readouterr() == (
        "",
        f"{CANCEL_USAGE}agent-runner cancel: error: argument --wait: expected a positive number of seconds, "
        f"got {seconds!r}\n",
    )


@pytest.mark.parametrize(
    ("argv", "usage_start", "message"),
    [
        pytest.param(["run"], "usage: agent-runner run [-h]", "give either a PROMPT or --file RUN.json", id="run"),
        pytest.param(
            ["inject", "r"], "usage: agent-runner inject [-h]", "give either TEXT or --file BLOCKS.json", id="inject"
        ),
        pytest.param(
            ["params", "r", "top_k=1", "top_k=2"],
            "usage: agent-runner params [-h]",
            "top_k given more than once",
            id="params",
        ),
    ],
)
async def test_a_rule_a_command_breaks_shows_that_commands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage_start: str, message: str
) -> None:
    """As argparse's own errors do: the top-level usage (``agent-runner [-h] COMMAND ...``) says nothing useful."""
    assert await cli.amain(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(usage_start)
    assert err.endswith(f"\nagent-runner {argv[0]}: error: {message}\n")
