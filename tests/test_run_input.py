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
    assert parse_run_input({**MINIMAL, "messages": messages}).messages == messages


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
        parse_run_input({**MINIMAL, "messages": [{"role": "user", "content": "hi"}, message]})
    assert str(e.value) == f"The run's input was rejected:\n- {problem}"
