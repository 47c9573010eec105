"""``python -m agent_runner.cli``: the ``agent-runner`` command."""

from agent_runner.cli import main

main()
