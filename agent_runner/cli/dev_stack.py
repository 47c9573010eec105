"""``agent-runner dev``: Temporal, a worker with the example tools, and Claude or a fake (``agent_runner.dev``)."""

from __future__ import annotations

import argparse

from agent_runner.cli.common import EXIT_OK, default_model, err


def _line(line: str) -> None:
    print(line, flush=True)


async def cmd_dev(args: argparse.Namespace) -> int:
    """``dev``: run the stack in the foreground, start it in the background (``--detach``), or stop it (``--stop``)."""
    from agent_runner import dev  # it serves the fake Messages API: loaded by this command alone
    from agent_runner.temporal_server import DEFAULT_PORT

    if args.stop:
        await dev.stop_stack(out=_line)
        return EXIT_OK
    modules = dev.tool_modules(args.tools)
    if args.detach:
        argv = ["--task-queue", args.task_queue, *(arg for module in args.tools for arg in ("--tools", module))]
        if args.port is not None:
            argv += ["--port", str(args.port)]
        await dev.start_detached(argv, modules, args.task_queue, out=_line, note=err)
        return EXIT_OK
    await dev.serve(
        modules, args.task_queue, default_model=default_model(), embedded_port=args.port or DEFAULT_PORT, out=_line
    )
    return EXIT_OK
