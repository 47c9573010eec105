"""The example agent's tools: weather and local time for a handful of cities, from fixed fake data.

Written exactly as for the Anthropic SDK's tool runner (``@beta_tool``, Google docstrings whose ``Args`` become the
parameter descriptions Claude sees), so a worker registers them unchanged::

    python worker.py --tools agent_runner.example_tools

``agent-runner demo`` runs them, and ``agent-runner dev`` registers them on its worker. The data is deterministic on
purpose: the demo, the README's walk-through and the tests can quote it.
"""

from __future__ import annotations

from anthropic import beta_tool
from anthropic.lib.tools import ToolError

# City (as Claude is likely to write it) -> (conditions, temperature in Celsius, fake local time).
_CITIES: dict[str, tuple[str, int, str]] = {
    "Berlin": ("cloudy", 17, "14:05"),
    "London": ("drizzle", 15, "13:05"),
    "New York": ("clear", 24, "08:05"),
    "Paris": ("sunny", 21, "14:05"),
    "San Francisco": ("fog", 14, "05:05"),
    "Sydney": ("windy", 12, "22:05"),
    "Tokyo": ("light rain", 18, "21:05"),
}

CITIES: tuple[str, ...] = tuple(_CITIES)
"""The cities the tools know, as they spell them; ``agent-runner dev``'s scripted model looks for them in a prompt."""

_UNITS = ("c", "f")


def _city(city: str) -> tuple[str, tuple[str, int, str]]:
    """The known city's canonical name and data, whatever the case and surrounding spaces of ``city``."""
    wanted = " ".join(city.split()).casefold()
    for name, data in _CITIES.items():
        if name.casefold() == wanted:
            return name, data
    raise ToolError(
        f"Unknown city {city!r}. This example tool only knows {', '.join(_CITIES)}: ask about one of those, "
        "spelled out in English."
    )


@beta_tool
def get_weather(city: str, unit: str = "c") -> str:
    """Get the current weather for a city.

    Args:
        city: The city name in English, e.g. Paris.
        unit: Temperature unit, "c" (Celsius, the default) or "f" (Fahrenheit).
    """
    name, (conditions, celsius, _time) = _city(city)
    unit = unit.strip().lower()
    if unit not in _UNITS:
        raise ToolError(f'Unknown unit {unit!r}: use "c" for Celsius or "f" for Fahrenheit.')
    degrees = celsius if unit == "c" else round(celsius * 9 / 5 + 32)
    return f"{conditions}, {degrees}{unit.upper()} in {name}"


@beta_tool
def get_time(city: str) -> str:
    """Get the local time in a city.

    Args:
        city: The city name in English, e.g. Tokyo.
    """
    name, (_conditions, _celsius, local_time) = _city(city)
    return f"{local_time} in {name}"
