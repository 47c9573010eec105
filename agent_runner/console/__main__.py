"""``python -m agent_runner.console``: leaves as ``agent-runner console`` does (``process_exit.exit_now``)."""

from agent_runner.console.server import main
from agent_runner.process_exit import exit_now

exit_now(main())
