"""User code that raises what is not an ``Exception`` must not stop the worker.

User code: a tool, a toolset's action, a reconcile function, a result hook.

``SystemExit`` (``sys.exit()``, argparse given bad input), ``KeyboardInterrupt`` and other ``BaseException`` that are
not ``Exception`` pass every ``except Exception``; raised in an asyncio task, ``SystemExit`` and ``KeyboardInterrupt``
leave the event loop, and the worker process exits with every run it holds: each retry of the call then stops the next
worker. Here they become ``UserCodeExited``, an ``Exception``, where the user's code is called, so the call ends as any
other call that raised (a tool's ``is_error`` result, a hook's failure). Cancellation still passes as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

_PASSED = (Exception, asyncio.CancelledError, GeneratorExit)
"""What leaves user code as it is: exceptions, and the cancellation and closing the worker itself causes."""


class UserCodeExited(Exception):  # noqa: N818 (named for what happened)
    """User code raised ``error``, a ``BaseException`` that is not an ``Exception`` (``SystemExit``, ...).

    Its ``repr`` is ``error``'s, so a tool's ``is_error`` result reads as for any exception (the SDK's ``repr(e)``).
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{error!r} was raised, which would have stopped the worker; the call ended with it")
        self.error = error

    def __repr__(self) -> str:
        return repr(self.error)


def contained(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, with a ``BaseException`` that is not an ``Exception`` raised as ``UserCodeExited``."""
    try:
        return fn(*args)
    except _PASSED:
        raise
    except BaseException as e:
        raise UserCodeExited(e) from e


async def awaited_contained(awaitable: Awaitable[_T]) -> _T:
    """``await awaitable``, with a ``BaseException`` that is not an ``Exception`` raised as ``UserCodeExited``."""
    try:
        return await awaitable
    except _PASSED:
        raise
    except BaseException as e:
        raise UserCodeExited(e) from e
