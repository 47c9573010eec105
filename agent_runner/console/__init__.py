"""A web console for operators: runs and what they wait for, transcripts, live text, approvals and steering.

Temporal's UI shows a run's events, but the conversation only as placeholders for the content the store holds, and it
cannot approve a tool call. The console reads and steers runs through the public client (``AgentRunner``): it lists
runs with what each waits for, shows a run's transcript with its stored content, streams the text Claude writes as
it comes, and approves (with edited input) or denies a waiting tool call, injects a message, retries the last turn,
stops the run or forks it from a turn.

Start it with ``python -m agent_runner.console`` (``main``), or inside a program with ``serving``/``serve`` or the
application factory ``create_app``. It binds to 127.0.0.1; on any other address it needs a token
(``security.py`` says what it guards against and how).
"""

from agent_runner.console.app import create_app
from agent_runner.console.security import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV
from agent_runner.console.server import main, serve, serving

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "TOKEN_ENV", "create_app", "main", "serve", "serving"]
