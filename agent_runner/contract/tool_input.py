"""Whether a tool call's input fits its tool's ``input_schema``: a person's edited input is checked as it is sent.

Claude's own input is not checked here: as in the SDK's runner, the tool itself refuses input it cannot take, and
Claude reads why in an ``is_error`` result. An approver's edited input is different: a person chose it, and a call
that only fails once it runs tells them nothing. The check is JSON Schema's (``jsonschema``, the reference
implementation), strict where a tool's own validation may be lenient (``"5"`` is no integer here): it refuses only
what the schema refuses. A ``$ref`` to another document is not fetched and no ``format`` is checked; a schema it
cannot use (none, not an object, invalid, or referring outside itself) refuses nothing. The run holds its tools'
schemas by reference, so ``approve_tool`` has the ``agent_runner.check_tool_input`` local activity read the schema
and call this (``activities/tools.py``, ``workflows/approvals.py``).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

MAX_PROBLEMS = 3
"""Problems named in one refusal; a person fixes the first few and sends it again."""


def input_problems(schema: object, value: Any) -> list[str]:
    """What is wrong with ``value`` under the JSON schema ``schema``, at most ``MAX_PROBLEMS`` of it.

    Returns:
        One line per problem, each naming where in the input it is (``at `city`: 5 is not of type 'string'``);
        empty when ``value`` fits, or when ``schema`` cannot be checked here.
    """
    if not isinstance(schema, dict):
        return []
    validator_class: type[Validator] = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    try:
        validator_class.check_schema(schema)
        # An empty registry of its own: without one, jsonschema fetches a `$ref` to another document over HTTP.
        validator = validator_class(schema, registry=referencing.Registry())
        errors = sorted(validator.iter_errors(value), key=lambda error: [str(p) for p in error.path])
    except (SchemaError, referencing.exceptions.Unresolvable, jsonschema.exceptions.UnknownType):
        return []
    return [_problem(error) for error in errors[:MAX_PROBLEMS]]


def _problem(error: jsonschema.ValidationError) -> str:
    """One validation error as a line: where it is, then the validator's message."""
    if not error.path:
        return error.message
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.path).lstrip(".")
    return f"at `{where}`: {error.message}"
