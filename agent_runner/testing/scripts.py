"""Script files for the fake Messages API, and the process that serves one (``python -m agent_runner.testing``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_runner.testing.replies import (
    Disconnect,
    DropMidStream,
    ErrorMidStream,
    Fault,
    Reply,
    ScriptItem,
    SlowStream,
    ThreadNotFound,
    ThreadUnsupported,
    bad_request,
    end_turn,
    overloaded,
    rate_limited,
    server_error,
    tool_call,
)
from agent_runner.testing.server import FakeMessagesAPI

_IN_PYTHON_ONLY = {"until"}
"""Fields a JSON script cannot give (``Reply.until`` is an event a test in the same process sets)."""


def _fields(cls: type[Any], data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {data!r}")
    known = {f.name for f in dataclasses.fields(cls)} - _IN_PYTHON_ONLY
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown} for {cls.__name__}; known: {sorted(known)}")
    return dict(data)


def _parse_reply(data: Any, where: str) -> Reply:
    return Reply(**_fields(Reply, data, where))


def _parse_item(entry: Any, where: str) -> ScriptItem:
    if not isinstance(entry, dict) or len(entry) != 1:
        raise ValueError(f"{where}: each script item must be an object with exactly one key, got {entry!r}")
    ((kind, data),) = entry.items()
    if kind == "reply":
        return _parse_reply(data, where)
    if kind == "end_turn":
        if isinstance(data, str):
            return end_turn(data)
        fields = dict(data)
        return end_turn(fields.pop("text"), **_fields(Reply, fields, where))
    if kind == "tool_call":
        fields = dict(data)
        args = {k: fields.pop(k) for k in ("name", "input", "id", "text") if k in fields}
        return tool_call(**args, **_fields(Reply, fields, where))
    if kind == "fault":
        return Fault(**_fields(Fault, data, where))
    if kind == "rate_limited":
        return rate_limited(float(data.get("retry_after", 1)) if isinstance(data, dict) else float(data))
    if kind == "overloaded":
        return overloaded()
    if kind == "server_error":
        return server_error()
    if kind == "bad_request":
        return bad_request(data["message"] if isinstance(data, dict) else str(data))
    if kind == "disconnect":
        return Disconnect(**_fields(Disconnect, data or {}, where))
    if kind == "thread_not_found":
        return ThreadNotFound()
    if kind == "thread_unsupported":
        fields = _fields(ThreadUnsupported, data or {}, where)
        return ThreadUnsupported(tuple(fields.get("unsupported", ())))
    stream_kinds: dict[str, type[SlowStream | DropMidStream | ErrorMidStream]] = {
        "slow_stream": SlowStream,
        "drop_mid_stream": DropMidStream,
        "error_mid_stream": ErrorMidStream,
    }
    if kind in stream_kinds:
        cls = stream_kinds[kind]
        fields = _fields(cls, data, where)
        fields["reply"] = _parse_reply(fields.get("reply"), f"{where}.reply")
        return cls(**fields)
    raise ValueError(f"{where}: unknown script item kind {kind!r}")


def parse_script(data: Any) -> list[ScriptItem]:
    """Script items from decoded JSON: a list of single-key objects.

    Kinds::

        {"reply": {"content": [...], "stop_reason": "end_turn", ...any Reply field}}
        {"end_turn": "text"}  or  {"end_turn": {"text": "...", ...Reply fields}}
        {"tool_call": {"name": "search", "input": {...}, "id": "optional", "text": "optional"}}
        {"fault": {"status": 529, "body": {...}, "headers": {...}, "delay": 0}}
        {"rate_limited": {"retry_after": 1.5}}   {"overloaded": {}}   {"server_error": {}}
        {"bad_request": {"message": "..."}}
        {"disconnect": {}}                       {"thread_not_found": {}}
        {"thread_unsupported": {"unsupported": ["fallbacks"]}}
        {"slow_stream": {"reply": {...}, "event_delay": 0.05}}
        {"drop_mid_stream": {"reply": {...}, "after_events": 4, "delay": 0}}
        {"error_mid_stream": {"reply": {...}, "after_events": 4, "error_type": "overloaded_error"}}

    Raises:
        ValueError: On an unknown kind or field.
    """
    if not isinstance(data, list):
        raise ValueError(f"a script must be a JSON list of items, got {type(data).__name__}")
    return [_parse_item(entry, f"script[{i}]") for i, entry in enumerate(data)]


def load_script(path: str | Path) -> list[ScriptItem]:
    """Script items from a JSON file; see :func:`parse_script` for the format."""
    return parse_script(json.loads(Path(path).read_text(encoding="utf-8")))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake as a process until SIGTERM or SIGINT; prints ``READY <url>`` when listening."""
    parser = argparse.ArgumentParser(
        prog="python -m agent_runner.testing",
        description="A wire-compatible fake of Anthropic's Messages API, answering from a script file.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--script", type=Path, help="JSON script file of replies and faults")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    fake = FakeMessagesAPI(args.port)
    if args.script is not None:
        fake.script(*load_script(args.script))
    with fake:
        print(f"READY {fake.url}", flush=True)  # noqa: T201 - the parent process waits for this line
        # A timed wait keeps the main thread responsive to signals.
        while not stop.wait(0.2):
            pass
    return 0
