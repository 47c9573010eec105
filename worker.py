"""The worker's entry point: ``python worker.py --tools my_pkg.my_tools``.

Everything lives in ``agent_runner.worker_command`` (the flags) and ``agent_runner.worker``; this file keeps the
design card's ``worker.py`` at the top of the repository and is what the container image runs. Installed, the same
command is ``agent-runner-worker``.
"""

from agent_runner.worker_command import console_main

if __name__ == "__main__":
    console_main()
