"""``python -m agent_runner.console``."""

import sys

from agent_runner.console.server import main

sys.exit(main())
