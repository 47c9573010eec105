"""``agent-runner store gc``: remove content no open or recently closed run references (``agent_runner/gc.py``)."""

from __future__ import annotations

import argparse

from agent_runner.cli.common import EXIT_OK, connected, out
from agent_runner.gc import collect_garbage
from agent_runner.store import open_store


async def cmd_store_gc(args: argparse.Namespace) -> int:
    """``store gc``: collect the store's garbage, or say what would go (``--dry-run``)."""
    # The store first: a wrong AGENT_RUNNER_STORE or missing keys is reported before Temporal is reached.
    async with open_store() as store, connected() as runner:
        collected = await collect_garbage(
            runner.client, store, retention=args.retention, grace=args.grace, dry_run=args.dry_run
        )
    out([collected.summary()])
    return EXIT_OK
