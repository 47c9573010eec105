"""The ``agent-runner`` argument parser: every command's flags, and the usage rules argparse cannot express.

Each command names its handler as ``(module, function)`` in ``agent_runner.cli``, imported only when the command
runs: a command loads what it needs and nothing else (only ``demo`` and ``dev`` load the fake Messages API).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agent_runner.cli.common import (
    BLOCKS_EXAMPLE,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    LIST_STATUSES,
    MODEL_ENV,
    TOOL_RESULTS_EXAMPLE,
)
from agent_runner.codec import KEYS_ENV
from agent_runner.contract.types import TASK_QUEUE
from agent_runner.gc import DEFAULT_GRACE
from agent_runner.priority import fairness_key_problem, fairness_weight_problem, priority_key_problem


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return number

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_version = _int_at_least(0, "a transcript version (0 or more)")


def _positive_seconds(value: str) -> float:
    """A number of seconds above 0: ``nan`` and ``inf`` parse as floats but are no time to wait."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):  # False for nan too
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return seconds


def _checked(convert: Callable[[str], Any], problem: Callable[[Any], str | None], what: str) -> Callable[[str], Any]:
    """An argparse type: ``convert(value)``, refused with ``problem``'s words (``agent_runner.priority``)."""

    def parse(value: str) -> Any:
        try:
            converted = convert(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
        said = problem(converted)
        if said is not None:
            raise argparse.ArgumentTypeError(said)
        return converted

    return parse


def _priority_flags(sub: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--priority-key``, ``--fairness-key`` and ``--fairness-weight``: the run's ``temporalio.common.Priority``."""
    original = "the run's"  # fork and send: the flags given change the original run's
    sub.add_argument(
        "--priority-key",
        type=_checked(int, priority_key_problem, "an integer from 1 to 5"),
        metavar="N",
        help=f"the run's priority in its task queues, 1 (first) to 5 (last) (default {original if inherited else 3})",
    )
    sub.add_argument(
        "--fairness-key",
        type=_checked(str, fairness_key_problem, "a tenant's id"),
        metavar="KEY",
        help="the tenant its queued work is shared out by, on a server with fairness on; at most 64 bytes "
        f"(default {original if inherited else 'none'})",
    )
    sub.add_argument(
        "--fairness-weight",
        type=_checked(float, fairness_weight_problem, "a number from 0.001 to 1000"),
        metavar="W",
        help=f"the fairness key's share against other keys, 0.001 to 1000 (default {original if inherited else 1.0})",
    )


def _duration(value: str) -> timedelta:
    """``30d``, ``12h``, ``1h30m``, ``0s``: a ``timedelta`` (units s, m, h, d, w)."""
    parts = re.findall(r"(\d+)([smhdw])", value)
    if not parts or "".join(number + unit for number, unit in parts) != value:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration: write e.g. 30d, 12h, 1h30m or 0s")
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    return sum((timedelta(**{units[unit]: int(number)}) for number, unit in parts), timedelta())


def _json_object(value: str) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r} ({e})") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f'expected a JSON object such as \'{{"path": "/tmp/x"}}\', got {value!r}')
    return data


def _tool_arg(value: str) -> str | dict[str, Any]:
    """A registered tool's name, or a raw tool definition given as a JSON object."""
    return _json_object(value) if value.lstrip().startswith("{") else value


def parse_param(assignment: str) -> tuple[str, Any]:
    """``KEY=JSON_VALUE`` as ``(key, value)``; a value that is not valid JSON is taken as a string.

    ``max_tokens=2048`` gives ``2048``, ``tool_choice={"type": "auto"}`` a dict, ``system=Be brief.`` the string,
    ``system="42"`` the string ``"42"``, and ``KEY=null`` ``None``, which removes the parameter.

    Raises:
        argparse.ArgumentTypeError: ``assignment`` has no ``=`` or no key.
    """
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=JSON_VALUE, e.g. max_tokens=2048, got {assignment!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command``, whose usage line is the one a mistake in that command should show."""
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _given_once(keys: list[str], error: Callable[[str], Any]) -> None:
    """Refuse keys given more than once (``error`` exits with the command's usage)."""
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        error(f"{', '.join(repeated)} given more than once")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The usage rules argparse cannot express; a broken one exits 2 with the command's usage, as argparse's own do."""
    error = _command_parser(parser, args.command).error
    if args.command == "run" and (args.prompt is None) == (args.file is None):
        error("give either a PROMPT or --file RUN.json")
    if args.command == "inject" and (args.text is None) == (args.file is None):
        error("give either TEXT or --file BLOCKS.json")
    if args.command == "fork":
        flags = [key for key in ("model", "system") if getattr(args, key) is not None]
        _given_once([key for key, _ in args.set] + flags, error)
    if args.command == "params":
        keys = [key for key, _ in args.params]
        _given_once(keys, error)
        if "wait" in keys:
            error("`wait` is not a request parameter")


def build_parser() -> argparse.ArgumentParser:
    """The ``agent-runner`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agent-runner",
        description="Durable Claude agent runs on Temporal: start, follow, inspect, steer and cancel them.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument(
            "--task-queue",
            default=TASK_QUEUE,
            help=f"the task queue runs start on and workers poll (default {TASK_QUEUE})",
        )
        return sub

    def steering(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = command(name, help)
        sub.add_argument("run_id", metavar="RUN_ID")
        return sub

    def edit(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's own word
        sub = steering(name, help)
        waiting = sub.add_mutually_exclusive_group()
        waiting.add_argument(
            "--wait",
            dest="wait",
            action="store_true",
            default=None,
            help="wait for the edit to apply and print the transcript version it produced (the default, except for "
            "a run in step mode, whose edits apply only once it is advanced); never for a person: to a run that "
            "waits for one (an approval, a step-mode pause) the edit prints that it was accepted and what the run "
            "waits for",
        )
        waiting.add_argument(
            "--no-wait",
            dest="wait",
            action="store_false",
            help="return once the run accepted the edit; it applies before the next turn",
        )
        return sub

    def expected_version(sub: argparse.ArgumentParser, *, required: bool = False) -> None:
        sub.add_argument(
            "--expected-version",
            type=_version,
            required=required,
            metavar="N",
            help="the transcript version this edit was made from (`agent-runner status` shows it; read it before "
            "the transcript): if the run has moved on, the edit is refused",
        )

    run = command("run", "Start a run, print its id, and follow it.")
    run.add_argument("prompt", nargs="?", metavar="PROMPT", help="the user's message")
    run.add_argument(
        "--file",
        metavar="RUN.json",
        help="the run's JSON input, as `temporal workflow start --input` takes it ('-' reads stdin); "
        "the other flags override its fields",
    )
    run.add_argument("--model", help=f"the model (default ${MODEL_ENV}, else {DEFAULT_MODEL})")
    run.add_argument(
        "--max-tokens", type=_positive_int, help=f"the most tokens per reply (default {DEFAULT_MAX_TOKENS})"
    )
    run.add_argument("--system", help="the system prompt")
    run.add_argument(
        "--tools",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="registered tools Claude may call (replaces the file's tools)",
    )
    run.add_argument(
        "--mcp",
        nargs="+",
        action="extend",
        metavar="SERVER",
        help="MCP servers the workers are configured with whose tools Claude may call (replaces the file's mcp)",
    )
    run.add_argument("--max-iterations", type=_positive_int, help="the most replies to ask for (default: no limit)")
    run.add_argument(
        "--no-thread", action="store_true", help="resend the full history every turn instead of using a thread"
    )
    run.add_argument("--id", help="the run's id (default agent-<uuid>)")
    run.add_argument("--follow", dest="follow", action="store_true", default=True, help="follow the run (default)")
    run.add_argument("--detach", dest="follow", action="store_false", help="print the run's id and exit")
    _priority_flags(run)
    run.set_defaults(handler=("runs", "cmd_run"))

    follow = command("follow", "Print a run's replies and tool results as they come.")
    follow.add_argument("run_id", metavar="RUN_ID")
    follow.add_argument(
        "--from-iteration", type=_positive_int, default=1, metavar="N", help="the first reply to print (default 1)"
    )
    follow.set_defaults(handler=("runs", "cmd_follow"))

    transcript = command("transcript", "Print a run's whole conversation.")
    transcript.add_argument("run_id", metavar="RUN_ID")
    transcript.add_argument("--json", action="store_true", help="the raw transcript, in the Messages API's shape")
    transcript.set_defaults(handler=("runs", "cmd_transcript"))

    listing = commands.add_parser("list", help="List runs, newest first.", description="List runs, newest first.")
    listing.add_argument(
        "--task-queue", default=None, help="only runs on this task queue (default: runs on every task queue)"
    )
    listing.add_argument(
        "--status",
        choices=sorted(LIST_STATUSES),
        help="only runs Temporal has in this state (completed includes runs that stopped, hit max_iterations or "
        "ran out of budget; the list shows each run's own status when its workers keep search attributes)",
    )
    listing.add_argument("--query", help="a further Temporal visibility query, e.g. \"StartTime > '2026-01-01'\"")
    listing.add_argument("--limit", type=_positive_int, default=50, help="the most runs to list (default 50)")
    listing.set_defaults(handler=("runs", "cmd_list"))

    status = command("status", "Print a run's status, turns, stop reason and token usage.")
    status.add_argument("run_id", metavar="RUN_ID")
    status.add_argument("--json", action="store_true", help="as JSON")
    status.set_defaults(handler=("runs", "cmd_status"))

    cancel = command("cancel", "Cancel a run: its in-flight model call and tools are stopped.")
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument(
        "--wait",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the run to stop (default 10)",
    )
    cancel.set_defaults(handler=("runs", "cmd_cancel"))

    fork = command("fork", "Start a new run from a chosen iteration of a run (its request for that turn).")
    fork.add_argument("run_id", metavar="RUN_ID")
    fork.add_argument("--from-iteration", type=_positive_int, required=True, metavar="N")
    fork.add_argument("--id", default=None, help="the new run's id (default: a new agent-<uuid>)")
    fork.add_argument("--model", default=None, help="what-if: the new run's model (default: the run's)")
    fork.add_argument("--system", default=None, metavar="TEXT", help="what-if: its system prompt (default: the run's)")
    fork.add_argument(
        "--set",
        action="append",
        default=[],
        type=parse_param,
        metavar="KEY=JSON_VALUE",
        help="what-if: any other run input it sets otherwise, e.g. temperature=0.2 'thinking={...}'; KEY=null leaves "
        "one out (repeatable)",
    )
    fork.add_argument(
        "--tool-results",
        choices=("run", "recorded", "recorded-only"),
        default="run",
        help="run: its tools run (the default); recorded: a call made as the run made it gets the run's result, the "
        "others run; recorded-only: the others are refused too, so no tool runs",
    )
    fork.add_argument("--detach", dest="follow", action="store_false", help="print the new run's id and return")
    _priority_flags(fork, inherited=True)
    fork.set_defaults(handler=("runs", "cmd_fork"), follow=True)

    diff = command("diff", "How two runs differ (a what-if fork and its run, say): how each ended, and the turns.")
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--context", type=int, default=3, metavar="N", help="lines of context around each change")
    diff.add_argument("--exit-code", action="store_true", help="exit 1 when they differ, as git diff does")
    diff.set_defaults(handler=("runs", "cmd_diff"))

    send = command("send", "Go on with an ended run's conversation: a new run that starts with your message.")
    send.add_argument("run_id", metavar="RUN_ID")
    send.add_argument("text", metavar="TEXT", help="the user's next message")
    send.add_argument("--id", default=None, help="the new run's id (default: a new agent-<uuid>)")
    send.add_argument("--detach", dest="follow", action="store_false", help="print the new run's id and return")
    _priority_flags(send, inherited=True)
    send.set_defaults(handler=("runs", "cmd_send"), follow=True)

    terminate = command("terminate", "End a run at once (a last resort: prefer stop or cancel).")
    terminate.add_argument("run_id", metavar="RUN_ID")
    terminate.add_argument("--reason", default="terminated from the command line")
    terminate.set_defaults(handler=("runs", "cmd_terminate"))

    inject = edit("inject", "Add user content before the next turn (it joins the tool results' message).")
    inject.add_argument("text", nargs="?", metavar="TEXT", help="the text to add")
    inject.add_argument(
        "--file", metavar="BLOCKS.json", help=f"a JSON list of content blocks instead of TEXT, e.g. {BLOCKS_EXAMPLE}"
    )
    expected_version(inject)
    inject.set_defaults(handler=("steering", "cmd_inject"))

    retry = edit("retry", "Discard Claude's last reply (its tools never run) and send the turn again.")
    expected_version(retry)
    retry.set_defaults(handler=("steering", "cmd_retry"))

    replace = edit("replace-history", "Replace the whole conversation.")
    replace.add_argument(
        "--file",
        required=True,
        metavar="MESSAGES.json",
        help="the new messages, a JSON list as `agent-runner transcript --json` prints it ('-' reads stdin)",
    )
    expected_version(replace, required=True)
    replace.set_defaults(handler=("steering", "cmd_replace_history"))

    params = edit("params", "Change request parameters for every later turn.")
    params.add_argument(
        "params",
        nargs="+",
        type=parse_param,
        metavar="KEY=JSON_VALUE",
        help='e.g. max_tokens=2048 \'tool_choice={"type": "auto"}\'; a value that is not valid JSON is a '
        "string; KEY=null removes the parameter",
    )
    params.set_defaults(handler=("steering", "cmd_params"))

    add_tools = edit("add-tools", "Make tools available from the next turn on.")
    add_tools.add_argument(
        "tools", nargs="+", type=_tool_arg, metavar="NAME", help="registered tools, or raw definitions as JSON objects"
    )
    add_tools.set_defaults(handler=("steering", "cmd_add_tools"))

    remove_tools = edit("remove-tools", "Take tools away from the next turn on.")
    remove_tools.add_argument("names", nargs="+", metavar="NAME", help="the tools' names")
    remove_tools.set_defaults(handler=("steering", "cmd_remove_tools"))

    stop = steering("stop", "End a run at its next step; a reply's tools that have not run never run.")
    stop.add_argument("--reason", help="why, kept in the run's status")
    stop.add_argument(
        "--no-wait", dest="wait", action="store_false", help="return at once instead of waiting for the run to end"
    )
    stop.set_defaults(handler=("steering", "cmd_stop"))

    approvals = steering("approvals", "List a run's tool calls that wait for approval.")
    approvals.add_argument("--json", action="store_true", help="as JSON, inputs whole")
    approvals.set_defaults(handler=("steering", "cmd_approvals"))

    approve = steering("approve", "Let a tool call that waits for approval run.")
    approve.add_argument("tool_use_id", metavar="TOOL_USE_ID")
    approve.add_argument(
        "--input", type=_json_object, metavar="JSON", help="run it with this input instead of Claude's"
    )
    approve.set_defaults(handler=("steering", "cmd_approve"))

    deny = steering("deny", "Refuse a tool call that waits for approval: it never runs and Claude sees the reason.")
    deny.add_argument("tool_use_id", metavar="TOOL_USE_ID")
    deny.add_argument("--reason", help="what Claude is told (default: The user denied this tool call.)")
    deny.set_defaults(handler=("steering", "cmd_deny"))

    advance = steering("advance", "Let a step-mode run go on past the reply it paused after.")
    advance.add_argument(
        "--tool-results",
        metavar="RESULTS.json",
        help="answer the reply's tool calls yourself (then no tool runs): a JSON list of tool_result blocks, e.g. "
        f"{TOOL_RESULTS_EXAMPLE}",
    )
    advance.set_defaults(handler=("steering", "cmd_advance"))

    wake = steering("wake", "Cut short the sleep Claude asked for (a run started with `sleep`).")
    wake.add_argument("--reason", help="why, passed on to Claude")
    wake.set_defaults(handler=("steering", "cmd_wake"))

    demo = command("demo", "Run the example weather-and-time agent end to end (no API key needed).")
    demo.add_argument(
        "--model", help=f"the model when ANTHROPIC_API_KEY is set (default ${MODEL_ENV}, else {DEFAULT_MODEL})"
    )
    demo.set_defaults(handler=("demo", "cmd_demo"))

    schedule = command("schedule", "Runs on a cron expression or an interval (Temporal Schedules).")
    schedule_commands = schedule.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")

    def schedule_command(name: str, help: str, queue_help: str) -> argparse.ArgumentParser:  # noqa: A002
        sub = schedule_commands.add_parser(name, help=help, description=help)
        # Taken after the subcommand too, as every other command takes it; SUPPRESS leaves the value given before
        # the subcommand (`schedule --task-queue Q create`) alone when none is given after it.
        sub.add_argument("--task-queue", default=argparse.SUPPRESS, help=queue_help)
        return sub

    create_help = "Create a schedule that starts a run with the given JSON input each time it fires."
    create = schedule_command(
        "create", create_help, f"the task queue the schedule's runs start on (default {TASK_QUEUE})"
    )
    create.add_argument("schedule_id", metavar="SCHEDULE_ID", help="its runs are named SCHEDULE_ID-<fire time>")
    create.add_argument(
        "--file",
        required=True,
        metavar="RUN.json",
        help="the run's JSON input, as `agent-runner run --file` takes it ('-' reads stdin)",
    )
    timing = create.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", metavar="EXPR", help="a cron expression in UTC, e.g. '0 7 * * *'")
    timing.add_argument("--every", type=_duration, metavar="DURATION", help="an interval, e.g. 1h or 30m")
    create.add_argument(
        "--overlap",
        default="skip",
        choices=["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"],
        help="what a firing does while the previous run still goes (default skip)",
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--now", action="store_true", help="also start one run now")
    _priority_flags(create)
    create.set_defaults(handler=("schedules", "cmd_schedule_create"))
    schedule_list = schedule_command(
        "list",
        "List schedules of runs, with the task queue each starts its runs on.",
        "accepted as every command accepts it; the list shows the schedules of every task queue",
    )
    schedule_list.set_defaults(handler=("schedules", "cmd_schedule_list"))
    delete_help = "Delete a schedule; the runs it started go on."
    delete = schedule_command("delete", delete_help, "accepted as every command accepts it: a schedule's id is enough")
    delete.add_argument("schedule_id", metavar="SCHEDULE_ID")
    delete.set_defaults(handler=("schedules", "cmd_schedule_delete"))

    console_help = "Serve the operators' web console (agent-runner console --help for its options)."
    # Listed for the help only: `amain` hands `console ...` to the console's own parser before this one runs.
    commands.add_parser("console", help=console_help, description=console_help, add_help=False)

    store = commands.add_parser("store", help="Maintain the content store.", description="Maintain the content store.")
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    gc_help = (
        "Remove stored content that no run open or closed within the retention references, and that was not "
        "written within the retention; safe while runs are live. The runs are those of the server and namespace "
        "TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE name (never the embedded server)."
    )
    gc = store_commands.add_parser("gc", help=gc_help, description=gc_help)
    gc.add_argument(
        "--retention", type=_duration, required=True, metavar="DURATION", help="e.g. 30d: how long content is kept"
    )
    gc.add_argument(
        "--grace",
        type=_duration,
        default=DEFAULT_GRACE,
        metavar="DURATION",
        help="content written this recently is kept whatever the retention (default 1h)",
    )
    gc.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    gc.add_argument(
        "--no-runs-ok",
        action="store_true",
        help="go on when Temporal lists no runs at all (refused by default: a wrong TEMPORAL_ADDRESS or "
        "TEMPORAL_NAMESPACE lists none, and everything would be removed)",
    )
    gc.set_defaults(handler=("store_gc", "cmd_store_gc"))
    reencrypt_help = (
        f"Encrypt, in place, what the store holds unencrypted (content written before {KEYS_ENV} was set); safe while "
        "runs are live."
    )
    reencrypt = store_commands.add_parser("reencrypt", help=reencrypt_help, description=reencrypt_help)
    reencrypt.add_argument(
        "--remove-plaintext",
        action="store_true",
        help="then remove the unencrypted copies: only once every worker and client runs with the keys",
    )
    reencrypt.set_defaults(handler=("store_gc", "cmd_store_reencrypt"))
    reseal_help = (
        f"After a key rotation, reseal under the current key (the first of {KEYS_ENV}) what older keys sealed, so "
        "that they can be dropped; safe while runs are live, and to run again."
    )
    reseal = store_commands.add_parser("reseal", help=reseal_help, description=reseal_help)
    reseal.add_argument("--check", action="store_true", help="print which keys seal what, change nothing")
    reseal.set_defaults(handler=("store_gc", "cmd_store_reseal"))
    dev = command(
        "dev",
        "Run a development stack: Temporal, a worker with the example tools, and Claude (without ANTHROPIC_API_KEY, "
        "a scripted fake of it).",
    )
    dev.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="also register this module's tools (repeatable; agent_runner.example_tools always is)",
    )
    dev.add_argument(
        "--port",
        type=_positive_int,
        metavar="N",
        help="the embedded Temporal server's port when Temporal's configuration names no server (default 7233; "
        "other commands then need TEMPORAL_ADDRESS=127.0.0.1:N)",
    )
    mode = dev.add_mutually_exclusive_group()
    mode.add_argument("--detach", action="store_true", help="run it in the background; return once it is ready")
    mode.add_argument("--stop", action="store_true", help="stop the running dev stack (it drains its worker first)")
    dev.set_defaults(handler=("dev_stack", "cmd_dev"))
    return parser
