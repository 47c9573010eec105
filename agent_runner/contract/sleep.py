"""The run's ``sleep`` option: the built-in ``sleep`` tool's policy and definition, checked with the run's input.

The tool itself (a durable timer a person or a new message can cut short) is ``workflows/sleep.py``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SLEEP_TOOL = "sleep"
"""The built-in tool's name, as Claude calls it."""


class SleepPolicy(BaseModel):
    """The run's ``sleep`` option: Claude may sleep, up to ``max_seconds`` at a time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_seconds: int = Field(default=86_400, ge=1, strict=True)
    """The longest one sleep may last; a longer one is cut to this, and the result says so. A day by default."""

    def definition(self) -> dict[str, Any]:
        """The tool definition Claude sees."""
        return {
            "name": SLEEP_TOOL,
            "description": (
                "Wait before going on: for a number of `seconds`, or `until` a time. Nothing runs while you sleep; "
                "a person or a new message may wake you early, and the result says whether the time ran out or what "
                f"woke you. One sleep lasts at most {self.max_seconds} seconds."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "seconds": {"type": "number", "minimum": 0, "description": "How long to wait, in seconds."},
                    "until": {
                        "type": "string",
                        "description": "When to wake: an ISO 8601 date and time with its time zone, such as "
                        "2026-12-24T09:00:00Z.",
                    },
                },
            },
        }


def parse_sleep(raw: dict[str, Any], tool_names: list[str], problems: list[str]) -> SleepPolicy | None:
    """The run's ``sleep`` option (``None``: no sleep tool), with what is wrong with it added to ``problems``."""
    value = raw.get("sleep")
    if value is None or value is False:
        return None
    try:
        policy = SleepPolicy() if value is True else SleepPolicy.model_validate(value)
    except ValidationError as e:
        problems.append(
            '`sleep` must be true, or an object such as {"max_seconds": 3600} (a positive whole number of '
            f"seconds): {'; '.join(err['msg'] for err in e.errors())}."
        )
        return None
    if SLEEP_TOOL in tool_names:
        problems.append(
            f"`sleep` offers Claude a built-in tool named `{SLEEP_TOOL}`, and the run has a tool or agent of that "
            "name: rename it, or leave `sleep` out."
        )
    return policy
