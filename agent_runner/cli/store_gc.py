"""The store's maintenance commands.

``agent-runner store gc`` removes content no open or recently closed run references (``agent_runner/gc.py``);
``agent-runner store reencrypt`` encrypts what the store holds unencrypted (``agent_runner.store.reencrypt``);
``agent-runner store reseal`` reseals under the current key what older keys sealed (``agent_runner/reseal.py``).
"""

from __future__ import annotations

import argparse

from agent_runner.cli.common import EXIT_OK, connected, out
from agent_runner.gc import collect_garbage
from agent_runner.reseal import reseal
from agent_runner.store import open_store, reencrypt


async def cmd_store_gc(args: argparse.Namespace) -> int:
    """``store gc``: collect the store's garbage, or say what would go (``--dry-run``)."""
    # The store first: a wrong AGENT_RUNNER_STORE or missing keys is reported before Temporal is reached.
    # Never the embedded server: a server this started would list no runs, and everything would go.
    async with open_store() as store, connected(embedded=False) as runner:
        collected = await collect_garbage(
            runner.client,
            store,
            retention=args.retention,
            grace=args.grace,
            dry_run=args.dry_run,
            no_runs_ok=args.no_runs_ok,
        )
    out([collected.summary()])
    return EXIT_OK


async def cmd_store_reencrypt(args: argparse.Namespace) -> int:
    """``store reencrypt``: seal the store's unencrypted content, and remove its copies (``--remove-plaintext``)."""
    done = await reencrypt(remove_plaintext=args.remove_plaintext)
    out([done.summary()])
    return EXIT_OK


async def cmd_store_reseal(args: argparse.Namespace) -> int:
    """``store reseal``: reseal under the current key what older keys sealed; ``--check`` says which seal what."""
    done = await reseal(check=args.check)
    out([done.summary()])
    return EXIT_OK
