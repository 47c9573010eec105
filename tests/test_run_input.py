"""The run's JSON input: what is accepted, and the exact message for what is not."""

from __future__ import annotations

import inspect

import pytest
from anthropic.resources.beta.messages.messages import AsyncMessages

from agent_runner.contract.errors import InvalidRunInput
from agent_runner.contract.run_input import API_PARAMS, parse_run_input

MINIMAL = {"model": "claude-fake-1", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def test_api_params_are_the_installed_sdks_create_parameters() -> None:
    """A parameter added to the SDK's `create` must be added here (or to the runner's own) on purpose."""
    sdk = set(inspect.signature(AsyncMessages.create).parameters) - {"self", "extra_headers", "extra_query"}
    sdk -= {"extra_body", "timeout", "messages", "tools", "thread", "stream", "compaction"}
    assert API_PARAMS == sdk


def test_api_params_pass_through_and_runner_options_split_off() -> None:
    spec = parse_run_input(
        {
            **MINIMAL,
            "system": "terse",
            "temperature": 0.2,
            "metadata": {"user_id": "u1"},
            "tools": ["get_weather", {"type": "web_search_20250305", "name": "web_search"}],
            "max_iterations": 3,
            "thread": False,
            "model_activity": {"heartbeat_timeout": "PT2S"},
            "eager_tools": True,
        }
    )
    assert spec.params == {
        "model": "claude-fake-1",
        "max_tokens": 10,
        "system": "terse",
        "temperature": 0.2,
        "metadata": {"user_id": "u1"},
    }
    assert spec.tools == ["get_weather", {"type": "web_search_20250305", "name": "web_search"}]
    assert (spec.max_iterations, spec.thread, spec.model_activity.heartbeat_timeout.total_seconds()) == (3, False, 2)
    assert spec.eager_tools is True and parse_run_input(MINIMAL).eager_tools is False


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            [1],
            "A run's input must be a JSON object with at least `model`, `max_tokens` and `messages`; got list.",
            id="not_an_object",
        ),
        pytest.param(
            {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
            "The run's input was rejected:\n- Missing required field `model`.",
            id="missing_model",
        ),
        pytest.param(
            {**MINIMAL, "messages": []},
            "The run's input was rejected:\n- `messages` must be a non-empty list of messages such as "
            '{"role": "user", "content": "Hi"}.',
            id="empty_messages",
        ),
        pytest.param(
            {**MINIMAL, "max_iterations": 0},
            "The run's input was rejected:\n- `max_iterations` must be a positive integer, or null for no limit.",
            id="zero_iterations",
        ),
        pytest.param(
            {**MINIMAL, "tools": [3]},
            "The run's input was rejected:\n- `tools[0]` must be a registered tool's name or a tool definition object.",
            id="bad_tool",
        ),
        pytest.param(
            {
                **MINIMAL,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_X", "content": "x"}]},
                ],
            },
            "The run's input was rejected:\n- `messages[1]`.content[0] answers `tool_use_id` 'toolu_X', which is not "
            "a `tool_use` of the assistant message right before it; Claude's API rejects such a history.",
            id="orphan_tool_result",
        ),
        pytest.param(
            {**MINIMAL, "thread": "yes"},
            "The run's input was rejected:\n- `thread` must be true (server-side message threads) or false (full "
            "history every turn).",
            id="thread_not_bool",
        ),
        pytest.param(
            {**MINIMAL, "eager_tools": "yes"},
            "The run's input was rejected:\n- `eager_tools` must be true (start tools while the reply streams) or "
            "false.",
            id="eager_tools_not_bool",
        ),
        pytest.param(
            {**MINIMAL, "continue_cut_replies": 1},
            "The run's input was rejected:\n- `continue_cut_replies` must be true (a retry goes on from the text a "
            "cut-off stream had sent) or false.",
            id="continue_cut_replies_not_bool",
        ),
    ],
)
def test_invalid_input_is_rejected_with_a_message_that_says_what_to_do(raw: object, message: str) -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input(raw)
    assert str(e.value) == message


def test_unknown_fields_are_named_with_the_allowed_ones() -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input({**MINIMAL, "stream": True})
    assert str(e.value).startswith(
        "The run's input was rejected:\n- Unknown field `stream`. `stream` is not a run option: follow a run with "
        "the client or `agent-runner follow`. Allowed: the Messages API parameters (betas, billing_policy,"
    )


def test_a_tool_result_answering_the_previous_assistant_tool_use_is_accepted() -> None:
    spec = parse_run_input(
        {
            **MINIMAL,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
            ],
        }
    )
    assert len(spec.messages) == 3


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"role": "system", "output_config": {"effort": "low"}}, id="system_output_config_only"),
        pytest.param({"role": "system", "clear_at": "next_user_message", "content": "Be brief."}, id="clear_at"),
        pytest.param(
            {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "t"}}]},
            id="tool_removal",
        ),
        pytest.param(
            {"role": "assistant", "content": [{"type": "text", "text": "Hi.", "citations": None}]},
            id="reply_block_as_returned",
        ),
        pytest.param({"role": "user", "content": [{"agent_runner.stored": "sha256:0"}]}, id="stored_block"),
        pytest.param({"role": "assistant", "content": ""}, id="empty_prefill"),
        pytest.param({"role": "assistant", "content": [{"type": "text", "text": " "}]}, id="blank_prefill_block"),
    ],
)
def test_every_message_shape_the_sdk_types_take_is_accepted(message: dict[str, object]) -> None:
    messages = [{"role": "user", "content": "hi"}, message]
    spec = parse_run_input({**MINIMAL, "messages": messages, "betas": ["inline-tools-2026-09-15"]})
    assert spec.messages == messages


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        pytest.param(
            {"role": "user", "content": [{"type": "text"}]},
            "`messages[1]`.content[0].text: Field required.",
            id="missing_field",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "text", "text": 5}]},
            "`messages[1]`.content[0].text: Input should be a valid string.",
            id="wrong_type",
        ),
        pytest.param(
            {"role": "system", "clear_at": "sometimes", "content": "Be brief."},
            "`messages[1]`.clear_at: Input should be 'next_user_message' or 'never'.",
            id="bad_clear_at",
        ),
        pytest.param(
            {"role": "system", "output_config": {}},
            "`messages[1]` is a system message with neither `content` nor an `output_config` field; the API rejects "
            "it. Give it one.",
            id="empty_system_message",
        ),
        pytest.param(
            {"role": "system", "output_config": {"format": {"type": "json_schema"}}},
            "`messages[1]`.output_config.format is not a field the SDK's types allow here; remove it.",
            id="format_only_top_level",
        ),
        pytest.param(
            {"role": "user", "content": "hi", "name": "bob"},
            "`messages[1]`.name is not a field the SDK's types allow here; remove it.",
            id="unknown_message_key",
        ),
        pytest.param(
            {"role": "system", "content": [{"type": "image", "source": {}}]},
            "`messages[1]`.content[0].type is 'image', not a content block type that goes here; use one of 'text', "
            "'tool_addition', 'tool_removal'.",
            id="block_type_the_role_does_not_take",
        ),
        pytest.param(
            {"role": "system", "content": [{"type": "image", "source": {}}, {"type": "text"}]},
            "`messages[1]`.content[1].text: Field required.\n- `messages[1]`.content[0].type is 'image', not a content "
            "block type that goes here; use one of 'text', 'tool_addition', 'tool_removal'.",
            id="each_block_for_itself",
        ),
        pytest.param(
            {"role": "user", "content": [3]},
            "`messages[1]`.content[0] must be a content block object with a string `type`.",
            id="untyped_block",
        ),
        pytest.param(
            {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference"}}]},
            "`messages[1]`.content[0].tool.name: Field required.",
            id="nested_missing_field",
        ),
        pytest.param(
            {"role": "user", "content": []},
            "`messages[1]` has empty content; the API takes that only in a last assistant message (a prefill). "
            "Give it text or content blocks, or leave the message out.",
            id="empty_content",
        ),
        pytest.param(
            {"role": "user", "content": ""},
            "`messages[1]` has empty content; the API takes that only in a last assistant message (a prefill). "
            "Give it text or content blocks, or leave the message out.",
            id="empty_text_content",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "text", "text": "\n "}]},
            "`messages[1]`.content[0] is a text block with no text but whitespace; the API rejects it. Leave the "
            "block out.",
            id="blank_text_block",
        ),
        pytest.param(
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]},
            "`messages[1]` ends the conversation with tool calls that have no results (toolu_1); the API refuses "
            "that. End it with the user message that holds their `tool_result` blocks, or leave the calls out (a "
            "run's own calls get their results from its tools: let them run, then read the transcript again).",
            id="unanswered_calls_at_the_end",
        ),
    ],
)
def test_a_malformed_message_is_refused_naming_its_index_and_field(message: dict[str, object], problem: str) -> None:
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input(
            {**MINIMAL, "messages": [{"role": "user", "content": "hi"}, message], "betas": ["inline-tools-2026-09-15"]}
        )
    assert str(e.value) == f"The run's input was rejected:\n- {problem}"


SCHEMA = {"type": "object", "properties": {}}
ADDED_X = {
    "role": "system",
    "content": [
        {
            "type": "tool_addition",
            "tool": {"type": "tool_definition", "definition": {"name": "x", "input_schema": SCHEMA}},
        }
    ],
}
"""A history message that gives the run the tool ``x``."""


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        pytest.param(
            {"tools": ["act", "act"]},
            "`tools[1]` is named `act`, as `tools[0]` is; the API refuses two tools of one name. Leave one of them "
            "out.",
            id="registered_twice",
        ),
        pytest.param(
            {"tools": ["act", {"name": "act", "input_schema": SCHEMA}]},
            "`tools[1]` is named `act`, as `tools[0]` is; the API refuses two tools of one name. Leave one of them "
            "out.",
            id="registered_and_raw",
        ),
        pytest.param(
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}] * 2},
            "`tools[1]` is named `web_search`, as `tools[0]` is; the API refuses two tools of one name. Leave one of "
            "them out.",
            id="server_tool_twice",
        ),
        pytest.param(
            {"tools": [{"name": "x"}]},
            "`tools[0]` is a custom tool without an `input_schema`; the API refuses it. Give the JSON schema of its "
            'input, such as {"type": "object", "properties": {}}, or the `type` of a server tool.',
            id="raw_without_input_schema",
        ),
        pytest.param(
            {"tools": [{"name": "bad name", "input_schema": SCHEMA}]},
            "`tools[0]`.name 'bad name' is not a tool name the API takes: use 1 to 128 letters, digits, `_` or `-`.",
            id="raw_name_the_api_refuses",
        ),
        pytest.param(
            {"tools": [{"name": "x", "input_schema": SCHEMA, "strict": "yes", "colour": "red"}]},
            "`tools[0]`.colour is not a field the SDK's types allow in a 'custom' tool; remove it.\n- "
            "`tools[0]`.strict: Input should be a valid boolean.",
            id="raw_fields_the_sdk_types_refuse",
        ),
        pytest.param(
            {"tools": [{"type": "web_search_20250305", "name": "search", "max_uses": "3"}]},
            "`tools[0]`.name: Input should be 'web_search'.\n- `tools[0]`.max_uses: Input should be a valid integer.",
            id="server_tool_misnamed",
        ),
        pytest.param(
            {"tools": [{"type": "web_search_2025", "name": "web_search"}]},
            "`tools[0]`.type is 'web_search_2025', not a tool type the SDK's types know; leave it out for a custom "
            "tool (with `name`, `description` and `input_schema`), or use one of advisor_20260301, bash_20241022, "
            "bash_20250124, browser_toolset_20260801, code_execution_20250522, code_execution_20250825, "
            "code_execution_20260120, code_execution_20260521, computer_20241022, computer_20250124, "
            "computer_20251124, computer_toolset_20260801, mcp_toolset, memory_20250818, text_editor_20241022, "
            "text_editor_20250124, text_editor_20250429, text_editor_20250728, tool_search_tool_bm25, "
            "tool_search_tool_bm25_20251119, tool_search_tool_regex, tool_search_tool_regex_20251119, "
            "web_fetch_20250910, web_fetch_20260209, web_fetch_20260309, web_fetch_20260318, web_search_20250305, "
            "web_search_20260209, web_search_20260318.",
            id="unknown_tool_type",
        ),
        pytest.param(
            {"tools": ["act"], "tool_choice": {"type": "tool", "name": "nope"}},
            "`tool_choice` names the tool `nope`, which the run does not have (its tools are `act`); the API refuses "
            'a request that forces a tool it was not given. Name one of its tools, or give {"type": "auto"}.',
            id="tool_choice_names_no_tool",
        ),
        pytest.param(
            {"tool_choice": {"type": "tool", "name": "nope"}},
            "`tool_choice` names the tool `nope`, which the run does not have (it has no tools); the API refuses a "
            'request that forces a tool it was not given. Name one of its tools, or give {"type": "auto"}.',
            id="tool_choice_without_tools",
        ),
    ],
)
def test_a_tool_list_the_api_refuses_is_refused_saying_what_to_do(fields: dict[str, object], problem: str) -> None:
    """Each of these started, and the run failed at its first request with the API's 400."""
    with pytest.raises(InvalidRunInput) as e:
        parse_run_input({**MINIMAL, **fields})
    assert str(e.value) == f"The run's input was rejected:\n- {problem}"


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}, id="server"),
        pytest.param({"tools": [{"type": "mcp_toolset", "mcp_server_name": "files"}]}, id="mcp_toolset"),
        pytest.param({"tools": [{"type": "browser_toolset_20260801"}]}, id="toolset"),
        pytest.param({"tools": [{"name": "x", "type": "custom", "input_schema": SCHEMA, "strict": True}]}, id="custom"),
        pytest.param(
            {"tools": [{"name": "x", "input_schema": SCHEMA, "description": {"agent_runner.stored": "sha256:0"}}]}
            | {"held": True},
            id="held_field",
        ),
        pytest.param({"tools": ["act"], "tool_choice": {"type": "tool", "name": "act"}}, id="choice_registered"),
        pytest.param(
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}
            | {"tool_choice": {"type": "tool", "name": "web_search"}},
            id="choice_server_tool",
        ),
        pytest.param(
            {
                "agents": [{"name": "helper", "description": "Helps."}],
                "tool_choice": {"type": "tool", "name": "helper"},
            },
            id="choice_agent",
        ),
        pytest.param({"sleep": True, "tool_choice": {"type": "tool", "name": "sleep"}}, id="choice_sleep"),
        pytest.param(
            {"messages": [{"role": "user", "content": "hi"}, ADDED_X], "tool_choice": {"type": "tool", "name": "x"}},
            id="choice_added_by_the_history",
        ),
        pytest.param(
            {"tools": [{"type": "mcp_toolset", "mcp_server_name": "files"}]}
            | {"tool_choice": {"type": "tool", "name": "read_file"}},
            id="choice_only_the_api_can_name",
        ),
        pytest.param({"mcp": ["files"], "tool_choice": {"type": "tool", "name": "read_file"}}, id="choice_mcp"),
    ],
)
def test_a_tool_list_the_api_takes_is_taken(fields: dict[str, object]) -> None:
    """Server tools, toolsets and MCP toolsets have no ``input_schema``; a ``tool_choice`` may name any tool the run
    offers, or one only the API can name (an MCP server's)."""
    spec = parse_run_input({**MINIMAL, "betas": ["inline-tools-2026-09-15"], **fields})
    assert spec.tools[: len(fields.get("tools", []))] == fields.get("tools", [])  # type: ignore[arg-type]
