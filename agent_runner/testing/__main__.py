"""``python -m agent_runner.testing --port 8765 --script script.json``: the fake Messages API as a process."""

import sys

from agent_runner.testing.scripts import main

sys.exit(main())
