"""How API failures become Temporal retry decisions: the SDK's rule, with the server's delay."""

from __future__ import annotations

from datetime import timedelta

import anthropic
import httpx2 as httpx
import pytest

from agent_runner.activities.claude import api_status_error, retry_after


def status_error(status: int, headers: dict[str, str] | None = None, body: object = None) -> anthropic.APIStatusError:
    request = httpx.Request("POST", "http://fake/v1/messages")
    response = httpx.Response(status, headers=headers or {}, request=request, json=body)
    return anthropic.APIStatusError("failed", response=response, body=body)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, True),
        (413, False),
        (429, True),
        (500, True),
        (503, True),
        (529, True),
    ],
)
def test_status_codes_map_to_the_sdks_retry_rule(status: int, retryable: bool) -> None:
    error = api_status_error(status_error(status, body={"type": "error", "error": {"type": "x", "message": "m"}}))
    assert error.non_retryable is (not retryable)
    assert error.type == ("ModelRequestRejected" if not retryable else "APIStatusError")


def test_x_should_retry_overrides_the_status() -> None:
    assert api_status_error(status_error(400, {"x-should-retry": "true"})).non_retryable is False
    assert api_status_error(status_error(503, {"x-should-retry": "false"})).non_retryable is True


def test_a_rejection_carries_the_apis_own_message() -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}
    error = api_status_error(status_error(400, body=body))
    assert error.message == (
        "Claude's API rejected the request with 400: invalid_request_error: max_tokens: too large. Fix the run's "
        "input (or the worker's ANTHROPIC_API_KEY for 401/403) and start the run again."
    )


def test_a_lost_thread_is_its_own_error_type_for_the_workflow_to_replay() -> None:
    body = {
        "type": "error",
        "error": {"type": "not_found_error", "message": "x", "details": {"error_code": "thread_not_found"}},
    }
    error = api_status_error(status_error(404, body=body))
    assert (error.type, error.message, error.non_retryable) == ("ThreadLost", "thread_not_found", True)


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after-ms": "250"}, timedelta(milliseconds=250)),
        ({"retry-after": "3"}, timedelta(seconds=3)),
        ({"retry-after-ms": "100", "retry-after": "9"}, timedelta(milliseconds=100)),
        ({}, None),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after_headers_set_the_next_delay(headers: dict[str, str], delay: timedelta | None) -> None:
    assert retry_after(httpx.Headers(headers)) == delay
    assert api_status_error(status_error(429, headers)).next_retry_delay == delay


@pytest.mark.parametrize(
    ("error_type", "retryable"),
    [("overloaded_error", True), ("api_error", True), ("rate_limit_error", True), ("invalid_request_error", False)],
)
def test_an_sse_error_event_after_a_200_is_judged_by_its_error_type(error_type: str, retryable: bool) -> None:
    # The SDK raises a plain APIStatusError with the stream's status (200) for an `event: error` mid-stream.
    body = {"type": "error", "error": {"type": error_type, "message": "went wrong"}}
    error = api_status_error(status_error(200, body=body))
    assert error.non_retryable is (not retryable)
    assert error.message == (
        f"Claude's API failed mid-stream ({error_type}: went wrong); retrying."
        if retryable
        else f"Claude's API failed mid-stream: {error_type}: went wrong. Fix the run's input and start the run again."
    )
