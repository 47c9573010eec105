"""``agent-runner dev``: a whole development stack in one command, so the README's commands work on a fresh clone.

The stack is what a run needs to go anywhere, in one process:

* **Temporal**: the server Temporal's environment configuration names (``TEMPORAL_ADDRESS``, a profile), else the
  embedded dev server on 127.0.0.1:7233 (reused if one already listens there), as every other command finds it.
* **A worker** on the task queue (default ``agent-runner``) with the example tools (``agent_runner.example_tools``)
  and the modules given with ``--tools``, and the content store ``AGENT_RUNNER_STORE`` names, as ``worker.py``.
* **A model**: Claude when ``ANTHROPIC_API_KEY`` is set; otherwise our scripted, wire-compatible fake of the Messages
  API (``agent_runner.testing``) with ``ScriptedClaude`` answering, so that nothing needs a key.

In the foreground it runs until Ctrl-C or SIGTERM, then drains the worker and stops what it started. ``--detach``
starts the same stack in the background, logging to ``dev.log``, and returns once it is ready (the worker polls);
``--stop`` stops it. The running stack holds an ``flock`` on ``dev.lock`` for its whole life, so "is one running" is
never answered from a stale pid, and writes what it runs to ``dev.json`` once ready; both files sit in the embedded
server's data directory (``temporal_server.state_dir()``, ``$AGENT_RUNNER_HOME`` if set).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_runner.contract.errors import ConfigurationError
from agent_runner.contract.types import TASK_QUEUE
from agent_runner.temporal_server import DEFAULT_PORT, state_dir
from agent_runner.testing import FakeMessagesAPI, Reply, text, tool_use

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "EXAMPLE_TOOLS",
    "TRY_COMMAND",
    "DevStack",
    "ScriptedClaude",
    "render_ready",
    "running_stack",
    "serve",
    "start_detached",
    "stop_stack",
    "try_command",
]

EXAMPLE_TOOLS = "agent_runner.example_tools"
"""The tool module every dev stack registers, so the README's runs find ``get_weather`` and ``get_time``."""

TRY_COMMAND = 'agent-runner run "What\'s the weather in Paris and Tokyo?" --tools get_weather'
"""The command the ready block suggests first."""

READY_TIMEOUT = 90.0
"""How long ``--detach`` waits for the stack to be ready: the embedded server's first start takes a few seconds."""

STOP_TIMEOUT = 60.0
"""How long ``--stop`` waits for the stack to drain its worker and stop its server before it kills them."""

POLLER_WAIT = 5.0
"""How long the stack waits at most for Temporal to list its worker among the task queue's pollers."""

DRAIN = timedelta(seconds=10)
"""How long in-flight activities may finish once the stack stops (a person waits for it; a run's retries do not)."""

_DETACHED_ENV = "AGENT_RUNNER_DEV_DETACHED"
"""Set in a stack that ``--detach`` started: its ready block names its log and ``--stop``."""

_STATE_FILE = "dev.json"
_LOCK_FILE = "dev.lock"
_LOG_FILE = "dev.log"


@dataclasses.dataclass(frozen=True)
class DevStack:
    """What a running dev stack runs, as its ready block shows it and ``dev.json`` holds it.

    Attributes:
        pid: The stack's process.
        temporal: The Temporal server's address.
        temporal_origin: Where that server comes from, for a person (embedded, ``TEMPORAL_ADDRESS``, ...).
        server_pid: The embedded server's process, when the stack started it (``--stop`` ends it if the stack
            could not).
        task_queue: The task queue the worker polls.
        modules: The tool modules the worker registered.
        tools: The tools' names.
        model: The model the worker calls, for a person.
        store: The content store's URL (without a password); clients that read transcripts must use the same.
        try_command: The first command to try with it.
        log: The stack's log file when it runs in the background.
    """

    pid: int
    temporal: str
    temporal_origin: str
    server_pid: int | None
    task_queue: str
    modules: list[str]
    tools: list[str]
    model: str
    store: str
    try_command: str
    log: str | None = None


def render_ready(stack: DevStack, *, detached: bool) -> list[str]:
    """The block a stack prints once it is ready: what runs where, the command to try, and how to stop it.

    Args:
        stack: The running stack.
        detached: Whether it runs in the background (stopped with ``--stop``) rather than in this terminal (Ctrl-C).
    """
    stop = f"agent-runner dev --stop (log: {stack.log})" if detached else "Ctrl-C"
    return [
        f"agent-runner dev is ready (pid {stack.pid})",
        f"  temporal    {stack.temporal} ({stack.temporal_origin})",
        f"  task queue  {stack.task_queue}",
        f"  tools       {', '.join(stack.tools) or '-'} (from {', '.join(stack.modules)})",
        f"  model       {stack.model}",
        f"  store       {stack.store}",
        f"  try         {stack.try_command}",
        f"  stop        {stop}",
    ]


def try_command(task_queue: str, address: str | None) -> str:
    """The command the ready block suggests: ``TRY_COMMAND``, with what it needs to find this stack.

    Args:
        task_queue: The stack's task queue.
        address: The address other commands must be given (an embedded server off the default port), or ``None``.
    """
    command = TRY_COMMAND if task_queue == TASK_QUEUE else f"{TRY_COMMAND} --task-queue {shlex.quote(task_queue)}"
    return command if address is None else f"TEMPORAL_ADDRESS={address} {command}"


# --------------------------------------------------------------------------------------------
# The scripted model
# --------------------------------------------------------------------------------------------

_TOOL_WORDS: Mapping[str, tuple[str, ...]] = {
    "get_weather": ("weather", "temperature", "rain", "sunny", "forecast", "warm", "cold"),
    "get_time": ("time", "clock", "hour"),
}
"""The example tools the scripted model calls, and the words of a prompt that ask for each."""

_TOOL_TOPICS = {"get_weather": "the weather", "get_time": "the local time"}

_QUOTE_LIMIT = 200


class ScriptedClaude:
    """The dev stack's model without an API key: a ``FakeMessagesAPI`` responder that answers any prompt sensibly.

    When the request offers ``get_weather`` or ``get_time`` and the user's messages name cities the example tools
    know, it calls the tools those messages ask for (both when they ask for neither) for each such city, all in one
    reply; once every call has its result it answers by quoting them, and says what it cannot do with anything else
    the user wrote (an injected message, say). Otherwise it replies in plain text that it is the scripted fake and
    what it can answer. It never calls a tool twice for one city, so a run always ends.

    It reads the whole conversation whatever the request's shape: for a thread's ``continue`` it adds the new
    messages to the conversation it answered before (each reply id it gives names one).

    Args:
        cities: The cities to look for, as the tools spell them; by default the example tools' own.
    """

    def __init__(self, cities: Sequence[str] | None = None) -> None:
        if cities is None:
            # Here, not at the top: the example tools import anthropic (seconds), which `dev --stop` does not need.
            from agent_runner.example_tools import CITIES

            cities = CITIES
        self._cities = tuple(cities)
        self._lock = threading.Lock()
        self._threads: dict[str, tuple[list[dict[str, Any]], list[str]]] = {}
        """Each thread reply's conversation (ending with the reply) and the tools its thread offers, by reply id."""
        self._replies = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        """The reply to one Messages API request body."""
        conversation, tools = self._conversation(body)
        no_tools = (body.get("tool_choice") or {}).get("type") == "none"
        content, stop_reason = self.answer(conversation, [] if no_tools else tools)
        with self._lock:
            self._replies += 1
            reply_id = f"msg_dev_{self._replies:04d}"
            # Our own tool_use ids, so the conversation kept for the thread is the one the run continues.
            calls = (block for block in content if block["type"] == "tool_use")
            for k, block in enumerate(calls, start=1):
                block["id"] = f"toolu_dev_{self._replies:04d}_{k}"
            if isinstance(body.get("thread"), dict):
                self._threads[reply_id] = ([*conversation, {"role": "assistant", "content": content}], tools)
        usage = {
            "input_tokens": 50 + len(json.dumps(conversation)) // 4,
            "output_tokens": 5 + len(json.dumps(content)) // 4,
        }
        return Reply(content=content, stop_reason=stop_reason, usage=usage, id=reply_id)

    def _conversation(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        messages = list(body.get("messages") or [])
        thread = body.get("thread")
        if isinstance(thread, dict) and thread.get("type") == "continue":
            with self._lock:
                before, tools = self._threads.get(str(thread.get("previous_message_id")), ([], []))
            return [*before, *messages], tools
        names = [str(t["name"]) for t in body.get("tools") or [] if isinstance(t, Mapping) and "name" in t]
        return messages, names

    def answer(
        self, conversation: Sequence[Mapping[str, Any]], tools: Sequence[str]
    ) -> tuple[list[dict[str, Any]], str]:
        """The reply's content blocks and stop reason for a whole conversation and the names of the tools offered."""
        said = _user_texts(conversation)
        asked = " ".join(said)
        cities = self._cities_in(asked)
        offered = [name for name in _TOOL_WORDS if name in tools]
        wanted = [name for name in offered if any(w in asked.casefold() for w in _TOOL_WORDS[name])] or offered
        calls = _tool_calls(conversation)
        missing = [(name, city) for name in wanted for city in cities if (name, city) not in calls]
        if missing:
            topics = [
                f"{_TOOL_TOPICS[name]} in {_join([c for n, c in missing if n == name])}"
                for name in wanted
                if any(n == name for n, _ in missing)
            ]
            blocks = [text(f"Let me check {_join(topics)}."), *(tool_use(None, n, {"city": c}) for n, c in missing)]
            return blocks, "tool_use"
        if calls:
            lines = ["Here is what the tools say:"]
            lines += [_quote_result(name, city, *outcome) for (name, city), outcome in calls.items() if outcome]
            lines += [
                f'You also wrote "{_clip(later)}": I am the scripted fake model of `agent-runner dev`, so I can only '
                "quote the tools."
                for later in said[1:]
            ]
            return [text("\n".join(lines))], "end_turn"
        return [text(self._cannot_answer(said[0] if said else "", tools, cities))], "end_turn"

    def _cities_in(self, asked: str) -> list[str]:
        found = [(m.start(), city) for city in self._cities if (m := re.search(rf"\b{re.escape(city)}\b", asked, re.I))]
        return [city for _, city in sorted(found)]

    def _cannot_answer(self, prompt: str, tools: Sequence[str], cities: Sequence[str]) -> str:
        intro = (
            f"I am the scripted fake model of `agent-runner dev` (ANTHROPIC_API_KEY is not set), so I cannot really "
            f'answer "{_clip(prompt)}".'
        )
        if not any(name in tools for name in _TOOL_WORDS):
            how = "Offer me the example tools (`--tools get_weather get_time`) and ask about the weather or the time"
        else:
            how = "Ask about the weather or the time"
        known = f"in {_join(list(self._cities), 'or')}" if not cities else ""
        return f"{intro} {how} {known}".rstrip() + ", or set ANTHROPIC_API_KEY to talk to Claude."


def _user_texts(conversation: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text of each user message that has some (tool results left out), in order."""
    texts: list[str] = []
    for message in conversation:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts = [content]
        else:
            parts = [
                str(b.get("text") or "") for b in content or [] if isinstance(b, Mapping) and b.get("type") == "text"
            ]
        joined = " ".join(p.strip() for p in parts if p.strip())
        if joined:
            texts.append(joined)
    return texts


def _tool_calls(conversation: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, bool] | None]:
    """Each example-tool call of the conversation by ``(tool, city)``: its result text and error flag, or ``None``."""
    by_id: dict[str, tuple[str, str]] = {}
    calls: dict[tuple[str, str], tuple[str, bool] | None] = {}
    for message in conversation:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_use" and block.get("name") in _TOOL_WORDS:
                key = (str(block["name"]), str((block.get("input") or {}).get("city")))
                by_id[str(block.get("id"))] = key
                calls.setdefault(key, None)
            elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in by_id:
                calls[by_id[str(block.get("tool_use_id"))]] = (
                    _result_text(block.get("content")),
                    bool(block.get("is_error")),
                )
    return calls


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(
        str(b.get("text") or "") for b in content or [] if isinstance(b, Mapping) and b.get("type") == "text"
    )


def _quote_result(name: str, city: str, result: str, is_error: bool) -> str:
    topic = _TOOL_TOPICS[name][4:].capitalize()  # "Weather", "Local time"
    if is_error:
        return f"- {topic} in {city}: unavailable ({result})"
    return f"- {topic} in {city}: {result.removesuffix(f' in {city}')}"


def _join(items: Sequence[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _clip(value: str) -> str:
    return value if len(value) <= _QUOTE_LIMIT else f"{value[: _QUOTE_LIMIT - 1]}…"


async def _search_attributes_registered(client: Client) -> bool:
    """Whether the namespace has every ``AgentRun*`` search attribute, so the stack's runs keep them current.

    The embedded server registers them, and with them the console lists what runs wait for; on a server without
    them, a run that set them would fail its workflow tasks, so the stack leaves them off there.
    """
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.service import RPCError

    from agent_runner.contract.types import SEARCH_ATTRIBUTE_TYPES

    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:  # not allowed to look (a cloud namespace's API key, say): leave them off
        return False
    return all(name in listed.custom_attributes for name in SEARCH_ATTRIBUTE_TYPES)


# --------------------------------------------------------------------------------------------
# The stack's files
# --------------------------------------------------------------------------------------------


def _file(name: str) -> Path:
    return state_dir() / name


def _try_lock() -> int | None:
    """The stack's lock, taken: its file descriptor; ``None`` when a running stack holds it."""
    path = _file(_LOCK_FILE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ConfigurationError(
            f"Cannot create {path}: {e.strerror or e}. Point AGENT_RUNNER_HOME at a writable directory."
        ) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _is_running() -> bool:
    fd = _try_lock()
    if fd is None:
        return True
    os.close(fd)
    return False


def _read_state() -> DevStack | None:
    try:
        data = json.loads(_file(_STATE_FILE).read_text(encoding="utf-8"))
        return DevStack(**data)
    except (OSError, ValueError, TypeError):
        return None


def _write_state(stack: DevStack) -> None:
    # Written whole, then renamed: a reader never sees half a file.
    path = _file(_STATE_FILE)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(dataclasses.asdict(stack)), encoding="utf-8")
    partial.replace(path)


def running_stack() -> DevStack | None:
    """The dev stack running on this machine (for this ``AGENT_RUNNER_HOME``), once it is ready; else ``None``."""
    if not _is_running():
        return None
    return _read_state()


def _already_running(stack: DevStack | None) -> ConfigurationError:
    if stack is None:
        return ConfigurationError(
            "A dev stack is starting already; wait for it, or stop it with `agent-runner dev --stop`."
        )
    return ConfigurationError(
        f"A dev stack is already running (pid {stack.pid}, Temporal {stack.temporal}, task queue {stack.task_queue}, "
        f"tools from {', '.join(stack.modules)}): use it, or stop it first with `agent-runner dev --stop`."
    )


# --------------------------------------------------------------------------------------------
# Running the stack
# --------------------------------------------------------------------------------------------


def tool_modules(extra: Sequence[str]) -> list[str]:
    """The example tools, then ``extra`` modules, each once."""
    return list(dict.fromkeys([EXAMPLE_TOOLS, *extra]))


async def _wait_for_poller(client: Any, task_queue: str, since: float) -> None:
    """Return once Temporal lists this process's worker among the task queue's pollers, or after ``POLLER_WAIT``.

    So that a run started right after the ready block finds the worker known to Temporal (a client that sees no
    poller says so). Temporal remembers a poller for minutes after it went away, so any poller will not do: this one
    is known by the client's identity and a poll after ``since``. Best effort: a queue split into partitions lists
    only the pollers of its first one, and a worker that polls another is still a worker.
    """
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    deadline = time.monotonic() + POLLER_WAIT
    while time.monotonic() < deadline:
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        if any(
            p.identity == client.identity and p.last_access_time.ToSeconds() >= int(since) for p in response.pollers
        ):
            return
        await asyncio.sleep(0.05)


def _model(default_model: str) -> tuple[FakeMessagesAPI | None, Callable[[], Any] | None, str]:
    """The fake Messages API this stack serves (if any), the worker's Anthropic client factory, and its description."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return (
            None,
            None,  # the worker's default client: the key and ANTHROPIC_BASE_URL from this environment
            f"Claude through the Anthropic API (ANTHROPIC_API_KEY is set); runs use {default_model} unless they name "
            "another",
        )
    import anthropic

    from agent_runner.activities.claude import default_client

    fake = FakeMessagesAPI().start()
    fake.responder = ScriptedClaude()

    def fake_claude() -> anthropic.AsyncAnthropic:
        # The fake accepts any key. It lives only in this worker's client, never in a run's input.
        return default_client(api_key="dev-key-for-the-fake-api", base_url=fake.url)

    return (
        fake,
        fake_claude,
        "the scripted fake Messages API (ANTHROPIC_API_KEY is not set): it calls get_weather and get_time for the "
        "cities a prompt names, then quotes them",
    )


async def serve(
    modules: Sequence[str],
    task_queue: str,
    *,
    default_model: str,
    embedded_port: int = DEFAULT_PORT,
    out: Callable[[str], None] = print,
) -> None:
    """Run the dev stack in this process until SIGINT or SIGTERM, then drain the worker and stop what it started.

    Args:
        modules: The tool modules to register (``tool_modules`` adds the example tools).
        task_queue: The task queue the worker polls.
        default_model: The model runs use when they name none, for the ready block.
        embedded_port: The port of the embedded server, when Temporal's configuration names none.
        out: Where the ready block and the shutdown lines go, one line per call.

    Raises:
        ConfigurationError: A stack is already running, or a part of it cannot start (Temporal, the store, a tool
            module); the message says what to do, in one line.
    """
    from agent_runner.activities.claude import ClaudeActivities
    from agent_runner.connection import connect
    from agent_runner.contract.types import MCP_CONFIG_ENV
    from agent_runner.mcp_config import load_mcp_config
    from agent_runner.store import open_store
    from agent_runner.temporal_server import EmbeddedKeeper, configured_address, keep_embedded_server
    from agent_runner.worker import build_registry, build_worker
    from agent_runner.worker_command import configure_logging

    lock = _try_lock()
    if lock is None:
        raise _already_running(_read_state())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    fake: FakeMessagesAPI | None = None
    try:
        _file(_STATE_FILE).unlink(missing_ok=True)
        configure_logging(os.environ.get("AGENT_RUNNER_LOG_FORMAT", "text"))
        sys.path.insert(0, os.getcwd())  # `--tools my_pkg.tools` from the directory the command runs in
        registry = build_registry(modules)
        store = open_store()  # at start, so a wrong AGENT_RUNNER_STORE stops the stack with its reason
        if store.url == "memory:":
            raise ConfigurationError(
                "AGENT_RUNNER_STORE=memory: lives in one process, so the CLI could not read transcripts: give a "
                "sqlite:/// or postgresql:// URL, or unset it."
            )
        configured = configured_address()
        fake, claude_factory, model = _model(default_model)
        started = time.time()
        client, server = await connect(embedded_port=embedded_port)
        # On the embedded server, the stack starts it again if the process that started it stops (EmbeddedKeeper).
        keeper = None if configured else EmbeddedKeeper(server, port=embedded_port, namespace=client.namespace)
        async with keep_embedded_server(keeper):
            worker = build_worker(
                client,
                registry=registry,
                task_queue=task_queue,
                claude=ClaudeActivities(claude_factory),
                store=store,
                graceful_shutdown_timeout=DRAIN,
                mcp=load_mcp_config(os.environ[MCP_CONFIG_ENV]) if os.environ.get(MCP_CONFIG_ENV) else None,
                search_attributes=await _search_attributes_registered(client),
            )
            async with worker:
                await _wait_for_poller(client, task_queue, started)
                address = client.service_client.config.target_host
                if configured is not None:
                    origin = (
                        "from TEMPORAL_ADDRESS" if os.environ.get("TEMPORAL_ADDRESS") else "from the config profile"
                    )
                elif server is not None:
                    origin = f"embedded, started by this stack; data in {server.db_filename}"
                else:
                    origin = "the embedded server that was already running"
                stack = DevStack(
                    pid=os.getpid(),
                    temporal=address,
                    temporal_origin=origin,
                    server_pid=server.pid if server is not None else None,
                    task_queue=task_queue,
                    modules=list(modules),
                    tools=sorted(registry.names),
                    model=model,
                    store=store.url,
                    # Other commands find the embedded server on its default port only.
                    try_command=try_command(
                        task_queue, address if configured is None and embedded_port != DEFAULT_PORT else None
                    ),
                    log=str(_file(_LOG_FILE)) if os.environ.get(_DETACHED_ENV) else None,
                )
                _write_state(stack)
                for line in render_ready(stack, detached=bool(os.environ.get(_DETACHED_ENV))):
                    out(line)
                await stop.wait()
                out("stopping: the worker finishes what it is doing (runs carry on when a worker comes back)")
    finally:
        if fake is not None:
            fake.stop()
        _file(_STATE_FILE).unlink(missing_ok=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        os.close(lock)
    out("stopped")


# --------------------------------------------------------------------------------------------
# In the background
# --------------------------------------------------------------------------------------------


async def start_detached(
    argv: Sequence[str],
    modules: Sequence[str],
    task_queue: str,
    *,
    out: Callable[[str], None] = print,
    note: Callable[[str], None] = print,
) -> None:
    """Start the stack in the background (``agent-runner dev ARGV``) and return once it is ready.

    A stack that already runs with the same tools and task queue is reused, with a note: running the README's
    walk-through twice works.

    Args:
        argv: The ``dev`` arguments of the stack to start (without ``--detach``).
        modules: The tool modules it registers, to compare with a running stack's.
        task_queue: Its task queue, likewise.
        out: Where the ready block goes, one line per call.
        note: Where the note about a reused stack goes.

    Raises:
        ConfigurationError: Another stack runs, or the new one stopped or hung while starting; the message is the
            stack's own error when it printed one, else it names its log.
    """
    if _is_running():
        stack = _read_state()
        if stack is None or stack.modules != list(modules) or stack.task_queue != task_queue:
            raise _already_running(stack)
        note(f"note: a dev stack is already running (pid {stack.pid}); using it.")
        for line in render_ready(stack, detached=stack.log is not None):
            out(line)
        return
    log = _file(_LOG_FILE)
    with log.open("w", encoding="utf-8") as sink:  # a fresh log per stack
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_runner.cli", "dev", *argv],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # Its own session: closing this terminal, or Ctrl-C in it, leaves the stack running.
            start_new_session=True,
            env={**os.environ, _DETACHED_ENV: "1", "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        code = proc.poll()
        if code is not None:
            raise ConfigurationError(_startup_error(log, code))
        stack = _read_state()
        if stack is not None and stack.pid == proc.pid:
            for line in render_ready(stack, detached=True):
                out(line)
            return
        if time.monotonic() > deadline:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise ConfigurationError(
                f"The dev stack was not ready after {READY_TIMEOUT:.0f} s, so it was stopped; its log {log} says why."
            )
        await asyncio.sleep(0.1)


def _startup_error(log: Path, code: int) -> str:
    """What a stack that exited while starting said was wrong: its last ``error:`` line, else where to look."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    if errors:
        return errors[-1]
    return f"The dev stack stopped while starting (exit code {code}); its log {log} says why."


async def stop_stack(*, out: Callable[[str], None] = print) -> None:
    """Stop the running dev stack (SIGTERM: it drains its worker and stops its server) and wait until it has.

    Stopping a stack that is not running is not an error: it says so. A stack that does not stop within
    ``STOP_TIMEOUT`` is killed, with the Temporal server it started.

    Args:
        out: Where the outcome goes, one line per call.

    Raises:
        ConfigurationError: A stack is starting and has not yet said which process it is.
    """
    if not _is_running():
        _file(_STATE_FILE).unlink(missing_ok=True)  # left by a stack that was killed
        out("No dev stack is running.")
        return
    stack = _read_state()
    deadline = time.monotonic() + READY_TIMEOUT
    while stack is None and _is_running() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # starting: it writes dev.json once ready
        stack = _read_state()
    if stack is None:
        if not _is_running():
            out("No dev stack is running.")
            return
        raise ConfigurationError(
            f"A dev stack is starting and has not said which process it is; its log {_file(_LOG_FILE)} says why."
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(stack.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while _is_running() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    if not _is_running():
        out(f"Stopped the dev stack (pid {stack.pid}).")
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(stack.pid, signal.SIGKILL)
    if stack.server_pid is not None:
        # The embedded server leads its own process group (temporal_server.EmbeddedTemporal), helpers included.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(stack.server_pid, signal.SIGKILL)
    out(f"The dev stack (pid {stack.pid}) did not stop within {STOP_TIMEOUT:.0f} s, so it was killed.")
