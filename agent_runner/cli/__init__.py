"""``agent-runner``: start, follow, inspect, steer and cancel agent runs from a terminal, and a self-contained demo.

Commands (each takes ``--task-queue``, default ``agent-runner``; ``list`` filters by it only when given)::

    agent-runner run "What's the weather in Paris?" --tools get_weather    # start a run and follow it
    agent-runner run --file run.json --detach                              # start a run, print its id
    agent-runner follow RUN_ID [--from-iteration N]                        # print turns as they stream
    agent-runner transcript RUN_ID [--json]                                # the whole conversation
    agent-runner list [--status running] [--limit N]                       # a table of runs
    agent-runner status RUN_ID [--json]                                    # status, turns, token usage
    agent-runner cancel RUN_ID                                             # stop a run
    agent-runner terminate RUN_ID [--reason TEXT]                          # end it at once (last resort)
    agent-runner fork RUN_ID --from-iteration N [--detach]                 # a new run from turn N's request
    agent-runner send RUN_ID TEXT [--detach]                               # go on with an ended run's conversation
    agent-runner demo                                                      # the example agent, end to end
    agent-runner store gc --retention 30d [--grace 1h] [--dry-run] [--no-runs-ok]  # remove what no run references
    agent-runner store reseal [--check]                                    # after a key rotation: drop old keys
    agent-runner dev [--detach | --stop] [--tools MODULE]                  # Temporal, a worker, Claude or a fake

Steering a live run (each edit is accepted at once and applies before the run's next model call)::

    agent-runner inject RUN_ID TEXT | --file BLOCKS.json [--expected-version N]
    agent-runner retry RUN_ID [--expected-version N]                       # discard the last reply, resend
    agent-runner replace-history RUN_ID --file MESSAGES.json --expected-version N
    agent-runner params RUN_ID KEY=JSON_VALUE...                           # e.g. max_tokens=2048; KEY=null removes
    agent-runner add-tools RUN_ID NAME... / remove-tools RUN_ID NAME...
    agent-runner stop RUN_ID [--reason TEXT] [--no-wait]                   # the SDK's close()
    agent-runner approvals RUN_ID [--json]                                 # tool calls waiting for a person
    agent-runner approve RUN_ID TOOL_USE_ID [--input JSON]
    agent-runner deny RUN_ID TOOL_USE_ID [--reason TEXT]
    agent-runner advance RUN_ID [--tool-results RESULTS.json]              # step mode: let the run go on
    agent-runner wake RUN_ID [--reason TEXT]                               # cut Claude's sleep short

An edit that applies at the boundary waits for it and prints ``applied at version N`` (the transcript version it
produced); with ``--no-wait``, or for a run in step mode (whose boundary comes only once it is advanced; ``--wait``
waits while it runs), it prints ``accepted; it applies before the next turn``. A refused edit prints ``error: <why>``
and exits 1. An edit to a run that waits for a person (an approval, a step-mode pause) never waits for them, even with
``--wait``: it prints that it was accepted and a note saying what the run waits for, with the command that answers it;
Ctrl-C while an edit waits says that the edit is still queued. ``follow`` shows what a run waits for (``⏸ waiting for
approval: ...``, ``⏸ paused after turn N``) with the command that answers it, and never answers it itself.

Temporal is reached through ``AgentRunner.connect()``: Temporal's standard environment configuration
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, a ``temporal.toml`` profile, ...), else the local embedded server on
127.0.0.1:7233, started if need be. A command stops an embedded server it started before it exits, except ``run``,
whose run needs the server to go on.

Exit codes: 0 success (a followed run that completed, reached ``max_iterations`` or was stopped), 1 an error or a
failed or cancelled run (printed as ``error: <message>``, one line, such as ``No worker is polling task queue ...``
with the command that starts one), 2 a usage error, 130 interrupted (Ctrl-C stops following or waiting, not the run),
141 output cut off (whatever read it, such as ``| head``, stopped reading; the command stops quietly, as Unix tools do).

The package is a client of the client: every command goes through ``AgentRunner``/``Run`` (``agent_runner.client``).
``parser`` holds the flags; ``runs``, ``steering``, ``demo``, ``dev_stack`` and ``store_gc`` the commands (the parser
names each command's module, imported when the command runs: only ``demo`` and ``dev`` load the fake Messages API);
``follow`` and ``render`` what a person sees (pure functions of the wire-format dicts, the typed status and the typed
events, tested line by line); and ``errors`` the one mapping of an error to its exit code and one-line message.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agent_runner.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    NO_KEY_NOTICE,
    default_model,
    err,
)
from agent_runner.cli.errors import report
from agent_runner.cli.parser import build_parser, check_args, parse_param
from agent_runner.cli.render import (
    EDIT_ACCEPTED,
    client_tool_use_ids,
    render_approvals,
    render_edit_outcome,
    render_pending_approval,
    render_reply,
    render_status,
    render_step_pause,
    render_summary,
    render_tool_result,
    render_tool_results,
    render_transcript,
    render_wait_for_people,
    tool_results_by_id,
    waiting_notices,
)
from agent_runner.cli.runs import build_run_input, list_query
from agent_runner.process_exit import exit_now

__all__ = [
    "EDIT_ACCEPTED",
    "NO_KEY_NOTICE",
    "amain",
    "build_parser",
    "build_run_input",
    "client_tool_use_ids",
    "default_model",
    "list_query",
    "main",
    "parse_param",
    "render_approvals",
    "render_edit_outcome",
    "render_pending_approval",
    "render_reply",
    "render_status",
    "render_step_pause",
    "render_summary",
    "render_tool_result",
    "render_tool_results",
    "render_transcript",
    "render_wait_for_people",
    "tool_results_by_id",
    "waiting_notices",
]


def _handler(args: Any) -> Callable[[Any], Any]:
    """The command's function, from the ``(module, function)`` the parser names; its module is imported now."""
    module, name = args.handler
    handler: Callable[[Any], Any] = getattr(importlib.import_module(f"agent_runner.cli.{module}"), name)
    return handler


async def amain(argv: Sequence[str] | None = None) -> int:
    """Run one ``agent-runner`` command and return its exit code (what ``main`` exits with).

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` by default.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["console"]:
        from agent_runner.console import main as console_main

        # The console has its own options and runs its own event loop: in a thread, not nested in this loop.
        return await asyncio.to_thread(console_main, arguments[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_args(parser, args)
    except SystemExit as e:  # argparse has printed the usage or the help
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        code: int = await _handler(args)(args)
    except Exception as e:
        reported = report(e)
        if reported is None:
            raise  # a bug: main prints its traceback
        return reported
    return code


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``agent-runner`` console script: ``amain`` in a fresh event loop, then exit without finalizing."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["console"]:
        # The web console owns its event loop and its Ctrl-C (it exits 0 when stopped): run it in the foreground.
        from agent_runner.console import main as console_main

        exit_now(console_main(arguments[1:]))
    try:
        code = asyncio.run(amain(argv))
    except KeyboardInterrupt:
        err("interrupted")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = _output_cut_off()
    except Exception:  # not one of the runner's errors: a bug, whose traceback helps
        traceback.print_exc()
        code = EXIT_ERROR
    exit_now(code)


def _output_cut_off() -> int:
    """Stop quietly once whatever read stdout (``| head``) has gone, and give the exit code that says so.

    Python ignores SIGPIPE, so a write to a closed pipe raises ``BrokenPipeError`` instead of ending the process as it
    ends a C tool; nobody is there to read a message about it. Stdout goes to ``os.devnull`` so that the final flush
    of what is still buffered cannot raise again (Python's documented recipe).
    """
    with contextlib.suppress(OSError, ValueError):  # stdout already closed, or not a file: nothing left to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE
