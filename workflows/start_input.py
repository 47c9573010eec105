"""A run's start input, read by the run itself: no input a client can send fails its workflow task for ever.

Temporal decodes a workflow's arguments before any of its code runs. Input it cannot decode (JSON nested deeper than
the decoder's recursion limit, a payload in an encoding no converter knows) or more arguments than the run takes (the
stock CLI's ``--input`` given twice) fail the workflow task, which the server then retries for ever: the run is wedged
and says nothing useful. So ``AgentRun`` takes its input as a ``RawValue`` (Temporal hands the payload over as it
is), decodes it here, and takes any further arguments as extra positional ones; a run given input it cannot use then
fails at once with ``InvalidRunInput``, as for any other bad input.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

NO_INPUT = RawValue(Payload())
"""The default of ``AgentRun``'s input: a run started with no input at all (never decoded, never changed)."""

F = TypeVar("F", bound=Callable[..., Any])


def one_raw_input(fn: F) -> F:
    """``fn`` as Temporal sees it: taking its first argument only, which Temporal then hands over undecoded.

    ``fn`` itself also takes extra positional arguments (``*more``): Temporal reads a workflow's argument types from
    its signature (``inspect.signature``, which a function's ``__signature__`` answers) and gives none when the
    signature has ``*args``, so without this the one argument would be decoded before the run could catch a failure.
    Should Temporal read the types some other way, it decodes the input itself and ``read`` takes it as it comes.
    """
    signature = inspect.signature(fn)
    one = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    fn.__signature__ = signature.replace(parameters=one)  # type: ignore[attr-defined]
    return fn


def read(raw_input: object, more: tuple[object, ...]) -> tuple[object, str | None]:
    """The run's input decoded, and why the run cannot use it (``None`` if it can be read).

    Args:
        raw_input: The run's first argument: a ``RawValue`` (or, if Temporal decoded it, the value).
        more: Any further arguments the run was started with.
    """
    if more:
        return None, (
            f"A run takes one input, a JSON object, and was started with {1 + len(more)}: give it once (the stock "
            "CLI's `--input` or `--input-file`), as one object holding at least `model`, `max_tokens` and `messages`."
        )
    try:
        return decoded(raw_input), None  # no input: the run's input check says what a run needs
    except Exception as e:  # whatever the converter raises: the payload is in history and can never decode
        return None, (
            f"The run's input cannot be read ({first_line(e)}). Start the run with one JSON "
            "object (encoding `json/plain`) holding at least `model`, `max_tokens` and `messages`."
        )


def decoded(raw_input: object) -> object:
    """The value ``raw_input`` holds (``None`` for no input at all), or what the payload converter raises.

    Args:
        raw_input: A ``RawValue`` (or, if Temporal decoded it, the value) from a function under ``one_raw_input``.
    """
    if raw_input is NO_INPUT:
        return None
    if not isinstance(raw_input, RawValue):
        return raw_input
    return workflow.payload_converter().from_payload(raw_input.payload)


def first_line(error: Exception) -> str:
    """What ``error`` says, in one line cut to a bound: a decoder's message can quote the whole input.

    Of a pydantic ``ValidationError``, its first error (where and what), not its title line.
    """
    if isinstance(error, ValidationError) and error.errors():
        errors = error.errors()
        where = ".".join(str(part) for part in errors[0]["loc"])
        line = f"{where}: {errors[0]['msg']}" if where else errors[0]["msg"]
        line += f"; and {len(errors) - 1} more" if len(errors) > 1 else ""
    else:
        line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line if len(line) <= 300 else line[:300] + "…"
