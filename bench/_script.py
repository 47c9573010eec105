"""How a benchmark script ends: its exit code, and no interpreter finalization."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


def run(main: Callable[[], int]) -> NoReturn:
    """Run ``main`` and exit with its code; every way out goes through ``os._exit``."""
    try:
        code = main()
    except SystemExit as exit_:  # argparse: --help, bad arguments
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # temporalio's native threads can crash a finalizing interpreter (sdk-python#300): leave without finalizing.
    os._exit(code)
