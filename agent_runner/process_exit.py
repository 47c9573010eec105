"""How the runner's commands end: flush what they printed, then leave without finalizing the interpreter.

temporalio's native threads can crash a finalizing interpreter (sdk-python#300), so every entry point that may have
started Temporal's runtime (the ``agent-runner`` command, the worker, the embedded Temporal server) leaves through
``exit_now``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``code`` at once (``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more can be said on it
            stream.flush()
    os._exit(code)
