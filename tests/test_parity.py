"""Parity with the SDK's tool runner, branch by branch: an inventory, each branch pinned by a differential case.

Every branch of anthropic 2.14.0's ``anthropic/lib/tools/_beta_runner.py`` and ``anthropic/lib/threads/`` is listed
below with the test that pins it. A differential case runs the same scripted replies through the SDK's runner (in
this process, against the fake Messages API) and through a durable run (one worker for the whole module), and
asserts (``assert_same``) identical request bodies (the exact JSON the fake received) and ``anthropic-beta`` headers,
identical tool calls and the identical final message. Cases run in both wire modes: on a server-side message thread
(``MESSAGE_THREADS_BETA``: a ``create``, then ``continue`` with only the new messages) and with the full history
(``thread=False``); tool changes travel in ``tool_addition`` / ``tool_removal`` system messages
(``INLINE_TOOLS_BETA``, given in ``betas`` on both sides, as neither adds it). The loop body's controls are the SDK's
runner methods on one side and the matching edits of a step-mode run on the other (``Steer``).

SDK files: B ``lib/tools/_beta_runner.py``, D ``lib/tools/_tool_dispatch.py``, F ``lib/tools/_beta_functions.py``,
T ``lib/threads/_thread_state.py``, R ``lib/threads/_beta_threads.py``, M ``lib/threads/_stream_managers.py``,
P ``lib/threads/_params.py``.
Tests are in this module unless a file is named: ``case[x]`` is ``test_each_branch_sends_what_the_sdk_sends`` with
case ``x`` (both wire modes), ``flavour[x]`` is ``test_every_runner_class_gets_the_same_requests_as_a_durable_run``
with runner class ``x`` (both wire modes). Durable run: *same*; *DIFFERS*, a strict xfail whose reason (a constant
below) gives the exact difference and where the fix lies; *deliberate*, with the reason in the notes; *n/a*, a
branch that cannot apply to a durable run, and why.

The loop: stop rules, iterations, closing

==============  ======================================================================================  ================
SDK             Branch; the tests that pin it                                                           Durable run
==============  ======================================================================================  ================
B:109, 748-755  tool_use: run the reply's client calls; their results in one user message, in block     same
                order. Pinned by: case[multi_turn], case[results_in_block_order].
B:110-112,      pause_turn, compaction: resume the turn, appending nothing (thread: continue with       same
747; T:395-396  messages []). Pinned by: case[pause_turn_resumes], case[compaction_stop_resumes].
B:113-117,      end_turn, stop_sequence, max_tokens, model_context_window_exceeded, refusal: stop; the  same
742-745         reply's calls never run. Pinned by: case[end_turn],
                case[end_turn_with_tool_use_runs_nothing], case[stop_sequence],
                case[max_tokens_with_tool_use], case[context_window_exceeded_with_tool_use],
                case[refusal_with_tool_use].
B:128-131       an absent or unknown stop reason stops. Pinned by: case[absent_stop_reason],            same
                case[unknown_stop_reason].
B:750-753       tool_use without a client call stops. Pinned by: case[tool_use_without_a_client_tool].  same
B:788-793       tool_use without content stops. Pinned by: case[tool_use_without_content].              same
B:750, 452      ... unless the thread was given messages while the reply was handled. Pinned by:        same (note 1)
                test_a_message_added_while_a_reply_calls_only_server_tools_keeps_the_loop_going.
B:553-558, 717  max_iterations is checked before each request. Pinned by:                               same
                case[max_iterations_runs_the_last_tools].
B:740, 665-679  every reply counts, pause_turn included; a compaction reply does not. Pinned by:        same
                case[max_iterations_counts_pause_turn],
                case[compaction_between_turns_is_not_an_iteration].
B:748-755,      the last reply's tools run after the cut-off; until_done() returns that reply. Pinned   same
760-768         by: case[max_iterations_runs_the_last_tools].
B:554-555,      close(): the reply's tools do not run, nothing more is sent. Pinned by:                 same (stop)
648-657;        case[close_runs_no_more_tools].
B:1177-1189
B:656,          a close from a running tool stops the loop at its next step. Pinned by:                 same (note 2)
1183-1189       tests/test_steering.py::test_stop_ends_the_run_and_the_current_replys_tools_never_run.
B:1162-1167     async: asking for an item while a close unwinds ends the iteration. Pinned by: not      n/a (note 2)
                pinned here.
B:685-712;      the run's span and its status. Pinned by: tests/test_tracing.py.                        deliberate (note
B:1222-1250                                                                                             3)
==============  ======================================================================================  ================

Runner classes and streaming

==============  ======================================================================================  ================
SDK             Branch; the tests that pin it                                                           Durable run
==============  ======================================================================================  ================
B:952-957       BetaToolRunner (and the async one): thread.parse, no stream field. Pinned by:           deliberate (note
                flavour[parse], flavour[async_parse].                                                   4)
B:1063-1074;    the streaming runners: thread.stream, "stream": true. Pinned by: flavour[stream],       same
B:1608-1619     flavour[async_stream], every case.
B:1129-1671     the async runners: the same loop, awaited. Pinned by: flavour[async_stream],            same
                flavour[async_parse].
B:1071-1073,    run_tools_eagerly: a call runs once the model moved on from it (the next block starts,  same (fixed:
1076-1126,      or the reply stops with tool_use); never at its own content_block_stop. Pinned by:      note 5)
1711-1736       flavour[eager], test_eager_tools_start_a_call_once_the_model_moved_on_from_it.
B:819-820       ... and its result is reused, not run again. Pinned by: flavour[eager].                 same
B:1723-1727     ... after a fallback block no call runs early. Pinned by: - (activities/claude.py       same (note 5)
                follows it).
B:1012-1061,    defer_tool_call / deferred_tool_calls: a held call still runs at the end of the loop    deliberate (note
1100-1101,      body. Pinned by: - (tests/test_steering.py: approvals).                                 6)
1114
==============  ======================================================================================  ================

Tool calls and results

==============  ======================================================================================  ================
SDK             Branch; the tests that pin it                                                           Durable run
==============  ======================================================================================  ================
B:822, 827-841  a tool the runner lacks or the conversation withdrew: "Error: Tool 'X' not found",      same (note 7)
                is_error. Pinned by: case[results_in_block_order] (no_such_tool; get_time, registered
                but not the run's).
D:162-184       the tools a call may run follow the history: tool_removal / tool_addition in system     same
                messages and in a compaction's tool_changes, the last change winning; a withdrawn
                tool's call is not found and never runs. Pinned by:
                case[tool_removed_in_the_messages_is_not_found],
                case[tool_removed_and_added_back_in_the_messages_runs],
                case[tool_removed_by_a_compaction_in_the_turn_is_not_found]; across continue-as-new
                and a compaction between turns: tests/test_tool_availability.py.
B:853-859;      success: a string (lone surrogates to U+FFFD), blocks as given (their text made well    same
D:265-283       formed), None as null. Pinned by: case[result_shapes].
B:860-866;      ToolError: its content, is_error. Pinned by: case[results_in_block_order].              same
D:256-257
B:867-874;      any other exception: repr, cut to 4096 characters, is_error. Pinned by:                 same
D:258           case[results_in_block_order] (a 5000-character error).
F:273-283       invalid input: "ValueError('Invalid arguments for function X')". Pinned by:             deliberate (note
                test_documented_differences_invalid_input_and_wrong_return_type                         8)
                (tests/test_differential.py).
D:277           a dict returned: its keys are sent. Pinned by: (the same test).                         deliberate (note
                                                                                                        8)
B:867           a BaseException propagates out of the loop. Pinned by: not pinned here.                 n/a (note 9)
B:770-784       generate_tool_call_response() is cached: the tools run once. Pinned by:                 same
                case[generate_tool_call_response_is_cached].
D:68-84,        raw definitions are sent and never run; a tool of the wrong flavour is refused. Pinned  same (note 9)
87-118          by: case[raw_definition_is_sent_and_never_run], case[tool_use_without_a_client_tool].
D:139-159       two tools of one name: the later wins. Pinned by:                                       deliberate (note
                tests/test_tool_registry.py::test_two_tools_with_one_name_are_refused.                  9)
B:577-598,      toolsets: dispatch by toolset_name, a failed member skips the rest, malformed calls.    same (note 10)
802-826,        Pinned by: tests/test_toolsets.py::test_each_action_runs_on_the_worker_and_results_echo_
1093-1113,      the_toolset, ...::test_after_a_failing_action_the_later_actions_of_its_toolset_are_not_
1751-1788       executed, ...::test_a_call_named_after_a_toolset_without_toolset_name_is_malformed_as_
                in_the_sdk, ...::test_a_toolset_the_run_does_not_have_is_not_found.
==============  ======================================================================================  ================

The loop body's controls

==============  ======================================================================================  ================
SDK             Branch; the tests that pin it                                                           Durable run
==============  ======================================================================================  ================
B:338-358, 754  append_messages() in the body: the caller owns the turn; the cache is cleared, so the   deliberate (note
                tools run again. Pinned by:                                                             11)
                test_inject_sends_what_append_messages_sends_and_runs_the_tools_once.
B:338-358       append_messages() with nothing: the turn is sent again, the dropped reply's tools       deliberate (note
                still run. Pinned by:                                                                   11)
                test_retry_resends_the_turn_without_running_the_dropped_replys_tools.
B:350-351       append_messages() before iterating: sent with the first request. Pinned by: every case  same
                (the initial messages).
B:462-467       tool results go right after the reply, ahead of messages the body appended to the       deliberate (note
                thread. Pinned by:                                                                      12)
                test_inject_sends_what_append_messages_sends_and_runs_the_tools_once.
B:284-336       set_messages_params(): per-turn params apply to later turns. Pinned by:                 same (note 13)
                case[set_messages_params_for_later_turns].
B:734-737;      a changed system or tools on a thread: AnthropicError before the reply's tools run.     deliberate (note
T:421-424,      Pinned by: test_a_system_change_on_a_thread_is_refused.                                 14)
507-521
B:447-460;      a rewritten history starts a new thread. Pinned by:                                     deliberate (note
T:189-217       tests/test_differential.py::test_replace_history_*,                                     15)
                tests/test_steering.py::test_replace_history_*.
B:469-506       add_tools(function tool): it runs at once, for the reply being handled too. Pinned by:  same
                case[add_tools_runs_the_replys_call_at_once].
B:496-500       add_tools(raw definition): a function tool of that name stops running. Pinned by:       same
                case[add_tools_raw_definition_stops_running_the_function_tool].
B:508-529,      remove_tools(): not found at once; a tool_removal system message after the results.     same
560-575         Pinned by: case[remove_tools_withdraws_the_replys_own_calls].
B:545-551       tool changes wait while the turn is paused. Pinned by:                                  same
                case[tool_changes_wait_out_a_pause_turn].
B:484-494,      toolsets cannot be added or removed. Pinned by:                                         same (note 10)
518-523         tests/test_toolsets.py::test_a_runs_toolsets_are_fixed_as_a_tool_runners_are,
                ...::test_add_tools_naming_a_registered_toolset_fails_at_the_boundary.
B:360-377,      compact_before_next_turn(): after the turn's tools, the whole history with compaction   same
391-403,        on a new thread; the summary becomes the history. Pinned by:
720-724         case[compaction_between_turns_is_not_an_iteration].
B:147-168       the compaction request drops what only shapes a reply. Pinned by:                       same
                case[compaction_request_drops_what_shapes_a_reply].
B:717, 722      a pending compaction waits for the stop rules: none is sent once max_iterations is      same
                reached. Pinned by: case[compaction_after_the_last_iteration_is_not_sent].
B:680-683,      a compaction asked for with the final turn runs after it, at max_iterations too;        same
742-752         until_done() returns it. Pinned by: case[compaction_after_a_final_turn],
                case[compaction_after_a_final_turn_at_max_iterations].
B:405-425       no compaction after a final turn with unanswered calls. Pinned by:                      same
                case[compaction_after_unanswered_tool_calls_is_skipped].
B:430-432       a compaction the server cannot thread stops threading. Pinned by:                       same
                tests/test_threads.py::test_a_compaction_the_server_cannot_thread_*.
B:433-435,      a compaction without a summary keeps the conversation. Pinned by:                       same
676-678         case[compaction_without_a_summary_keeps_the_history]; until_done() returns the turn
                before it: case[compaction_without_a_summary_after_a_final_turn_ends_on_the_turn].
B:718-721       a compaction waits while the turn is paused. Pinned by:                                  same
                case[compaction_waits_out_a_pause_turn].
B:436-438       tools withdrawn before a compaction stay withdrawn. Pinned by:                          same
                tests/test_tool_availability.py.
B:312-318,      no history change while a compaction is in flight. Pinned by: not pinned here.          n/a (note 16)
374-375
B:379-389,      no compaction while context_management has a compact_ edit, and no such edit while a    same (note 19)
314-315         compaction waits: ValueError at once. Pinned by:
                test_a_compaction_is_refused_while_context_management_compacts,
                test_a_compaction_edit_is_refused_while_a_compaction_waits.
B:134-140       a compaction param is refused. Pinned by:                                               same
                test_a_compaction_param_is_refused_at_start_as_the_sdk_refuses_it.
==============  ======================================================================================  ================

Threads and requests

==============  ======================================================================================  ================
SDK             Branch; the tests that pin it                                                           Durable run
==============  ======================================================================================  ================
R:70-85         threaded unless thread=False. Pinned by: every case, in both wire modes.                same
T:386-409       create sends the whole history, system and tools; continue only what is new, without    same (note 21)
                them. tools is the runner's list, [] when it has none (a run without tools sends []
                too). Pinned by: every case (thread); case[no_tools],
                case[no_tools_replays_a_lost_thread], case[no_tools_goes_unthreaded],
                case[no_tools_compaction], case[no_tools_until_add_tools].
T:401-403,      the threads beta after the caller's betas, a fallback-credit beta of the caller's       same (note 21)
457-468         included; the middleware's fallback-credit beta after it unless the caller gave it.
                Pinned by: case[params_pass_through],
                case[betas_with_the_fallback_credit_one_of_the_callers_own], case[betas_empty] (every
                case compares anthropic-beta);
                tests/test_refusal_splice.py::test_the_beta_header_is_the_middlewares_whatever_betas_
                the_caller_gave.
T:577-583       the threads beta added to a caller's anthropic-beta header. Pinned by: not pinned       n/a (note 17)
                here.
T:275-285;      thread_not_found, thread_already_continued, thread_continue_in_flight: the turn again,  same
R:340-348       whole, on a new thread. Pinned by:
                case[thread_not_found_replays_without_cache_control],
                case[thread_already_continued_replays], case[thread_continue_in_flight_replays].
T:411-419       ... the answered messages without cache_control. Pinned by:                             same
                case[thread_not_found_replays_without_cache_control].
T:276-282       lost again on the first continue after a replay: no thread from then on; lost on a      same
                later continue: replayed again. Pinned by:
                case[thread_lost_again_after_a_replay_goes_unthreaded],
                case[thread_lost_later_after_a_replay_replays_again].
T:286-293       thread_unsupported_request, on a create or a continue: the turn again without a         same
                thread, and no thread from then on. Pinned by:
                case[thread_unsupported_goes_unthreaded],
                case[thread_unsupported_on_a_continue_goes_unthreaded].
T:294;          any other rejection ends the loop with the API's error. Pinned by:                      deliberate (note
R:347-348       tests/test_loop.py::test_rejected_request_fails_the_run_with_the_apis_message.          18)
T:314-317       a refused turn on a thread is not recorded; the next turn starts a new thread. Pinned   same
                by: case[refusal_with_tool_use],
                test_after_a_refusal_on_a_thread_the_conversation_goes_on_without_the_refused_turn.
T:322-327       later turns continue from the reply. Pinned by: every case (thread).                    same
T:328-329       a reply a fallback model wrote: the next turn starts a new thread. Pinned by:           same
                case[fallback_reply_starts_a_new_thread].
T:332-341       the reply's container: named when none is, its id added to one without, one named       same
                kept. Pinned by: case[container_given_without_id_gets_the_replys],
                case[container_named_stays].
T:343-372;      a stream that ended before message_stop: the partial reply kept, a new thread, the      deliberate (note
M:118-128       turn sent again. Pinned by: tests/test_streaming.py.                                    18)
T:107-116,      appends during a turn in flight, per-turn overrides of a create. Pinned by: not pinned  n/a (note 17)
145-148,        here.
319-321
T:173-187,      every request field passes through (temperature, top_k, top_p as extra_body). Pinned    same
444-455         by: case[params_pass_through].
P:113-120       an unexpected keyword is refused; so is a thread given in the params. Pinned by:        same (note 20)
P:123-129       tests/test_run_input.py::test_unknown_fields_are_named_with_the_allowed_ones,
                ...::test_invalid_input_is_rejected_with_a_message_that_says_what_to_do.
-               every message shape 2.14.0's types take is sent as given: a system message with         same
                output_config and no content, one with clear_at. Pinned by:
                case[system_message_with_output_config_only], case[system_message_with_clear_at].
==============  ======================================================================================  ================

Notes:

1. The SDK ends its loop on a stop reply whatever the body did (B:742-745); an ``inject``, ``retry`` or
   ``replace_history`` accepted while a run's final reply was written keeps the conversation going (a run is steered
   from outside, so there is no later runner to go on with).
2. Stopping is an update to the workflow (``Run.stop``), not a call on an in-process iterator: it applies at the
   run's next step wherever it comes from.
3. A run's spans come from Temporal's tracing (``tests/test_tracing.py``), not the SDK's
   ``anthropic.messages.tool_runner`` tree; nothing of them is on the wire.
4. A durable run always streams: each event heartbeats the model call. Against the non-streaming runners the bodies
   differ in ``"stream": true`` alone.
5. ``activities/claude.py`` signalled a ``tool_use`` as ready at its own ``content_block_stop``, so the last call
   of a reply cut off by ``max_tokens`` (its input possibly cut short) ran eagerly. It now follows
   ``EagerToolCalls.track``, the ``fallback`` rule included (not observable here: the calls of a reply with a fallback
   block run at its end either way).
6. Holding a call is the approval machinery (``requires_approval``, ``approve_tool``/``deny_tool``): a held call runs
   only once approved, and a denied one never runs.
7. The SDK also warns (``UserWarning``); a run logs a warning on the worker.
8. ``tests/test_differential.py`` pins both: pydantic's details follow the SDK's text, so the model can correct its
   call; a return value other than a string, blocks or ``None`` is an ``is_error`` result saying so.
9. Tools run as activities: a worker registers each name once (``ToolRegistry`` refuses a second tool under a name)
   and runs sync and async tools alike. What a ``BaseException`` in a tool does is the worker's concern, and a
   cancellation is Temporal's: neither is an outcome of the loop to compare.
10. Runnable toolsets register on a worker (README, "Runnable toolsets"); each action is one activity, the actions
    of one toolset in a turn run in order (the turn's other calls beside them), and its ``tool_result`` echoes
    ``toolset_name``. The run refuses an edit that adds one of its toolsets again, replaces it with a definition or
    removes it (``EditRejected``, the SDK's ``ToolsetsFixedError`` text) and goes on; ``add_tools`` naming another
    registered toolset fails when it applies, once the workers described it as one
    (``test_add_tools_naming_a_registered_toolset_fails_at_the_boundary``).
11. A run's edits never run a tool twice and never run a dropped reply's tools (``contract/steering.py``).
12. ``inject`` joins the message holding the tool results, so a history never holds two user messages in a row.
13. ``update_params`` changes the parameters it names and keeps the others; ``set_messages_params`` replaces all
    but ``betas``, ``user_profile_id`` and ``workspace_id`` (B:306-308).
14. The run refuses the ``update_params`` edit itself, saying what to do, and goes on unchanged; the SDK's loop
    raises and is done.
15. ``replace_history`` takes the whole history, the last reply and its results included.
16. Edits apply one at a time at the iteration boundary, so none can meet a compaction in flight.
17. A run has no request options (``extra_headers``) and no per-turn overrides; every edit applies at the boundary.
18. Temporal retries a model call whose request failed, or whose stream ended early, as a whole activity attempt
    (the SDK's own retries are off): nothing partial is recorded, and a rejection fails the run with the API's
    message.
19. The run refuses the ``compact`` edit itself (``EditRejected``, saying what to do) where the SDK's
    ``compact_before_next_turn()`` raises ``ValueError``, and refuses an ``update_params`` that adds a compaction edit
    while a compaction is queued, as the SDK's ``set_messages_params`` does; the run goes on unchanged.
20. The run refuses its input at start (``InvalidRunInput``, naming the fields it takes) where the SDK raises
    ``TypeError``; ``thread`` is the run's own option, true or false, as the SDK's ``tool_runner(thread=False)``.
21. Since the ``request-shape-as-the-sdk`` patch (``workflows/request_shape.py``). A run recorded before it keeps
    sending what it sent to its end: no ``tools`` field when it has no tools, and the threads beta ahead of a
    fallback-credit beta of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest
import pytest_asyncio
from anthropic import beta_async_tool, beta_tool
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMessage
from temporalio.testing import WorkflowEnvironment

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolRegistry
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import EditRejected, InvalidRunInput
from agent_runner.contract.steering import INLINE_TOOLS_BETA
from agent_runner.contract.types import FALLBACK_CREDIT_BETA
from agent_runner.testing import (
    FakeMessagesAPI,
    Fault,
    Reply,
    ScriptItem,
    SlowStream,
    ThreadNotFound,
    ThreadUnsupported,
    end_turn,
    error_body,
    text,
    tool_use,
)
from agent_runner.worker import build_worker
from tests.conftest import anthropic_client_factory

# Some branches send Claude a call to a tool the SDK's runner does not hold, on purpose: it warns each time.
pytestmark = pytest.mark.filterwarnings("ignore:Tool '.*' not found in tool runner:UserWarning")

CALLS: list[tuple[str, str]] = []
"""Every tool call either side made, as ``(tool, argument)``: both run in this process."""


# Each tool twice, with the same definition: the SDK's sync runners take `@beta_tool` functions and its async runners
# `@beta_async_tool` ones; the worker registers the sync ones (a durable run does not care which flavour a tool is).


@beta_tool
def get_weather(city: str, unit: str = "c") -> str:
    """Get the current weather for a city.

    Args:
        city: The city name, e.g. Paris.
        unit: Temperature unit, "c" or "f".
    """
    CALLS.append(("get_weather", city))
    return f"sunny, 21{unit.upper()} in {city}"


@beta_tool
def fail_disk(path: str) -> str:
    """Write to a disk that is full.

    Args:
        path: Where to write.
    """
    CALLS.append(("fail_disk", path))
    raise ValueError(f"boom: disk full at {path}" + "!" * 5000)


@beta_tool
def refuse(reason: str) -> str:
    """Refuse with structured content.

    Args:
        reason: Why.
    """
    CALLS.append(("refuse", reason))
    raise ToolError(f"refused: {reason}")


@beta_tool
def shapes(kind: str) -> Any:
    """Return a result of the given kind.

    Args:
        kind: none, blocks or surrogate.
    """
    CALLS.append(("shapes", kind))
    return _shape(kind)


@beta_tool
def get_time(city: str) -> str:
    """Get the local time in a city.

    Args:
        city: The city name.
    """
    CALLS.append(("get_time", city))
    return f"14:05 in {city}"


def _shape(kind: str) -> Any:
    if kind == "none":
        return None
    if kind == "blocks":
        return [
            {"type": "text", "text": "a chart \ud800"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        ]
    return "lone \udc00 surrogate"


@beta_async_tool(name="get_weather")
async def get_weather_async(city: str, unit: str = "c") -> str:
    """Get the current weather for a city.

    Args:
        city: The city name, e.g. Paris.
        unit: Temperature unit, "c" or "f".
    """
    CALLS.append(("get_weather", city))
    return f"sunny, 21{unit.upper()} in {city}"


@beta_async_tool(name="fail_disk")
async def fail_disk_async(path: str) -> str:
    """Write to a disk that is full.

    Args:
        path: Where to write.
    """
    CALLS.append(("fail_disk", path))
    raise ValueError(f"boom: disk full at {path}" + "!" * 5000)


@beta_async_tool(name="refuse")
async def refuse_async(reason: str) -> str:
    """Refuse with structured content.

    Args:
        reason: Why.
    """
    CALLS.append(("refuse", reason))
    raise ToolError(f"refused: {reason}")


@beta_async_tool(name="shapes")
async def shapes_async(kind: str) -> Any:
    """Return a result of the given kind.

    Args:
        kind: none, blocks or surrogate.
    """
    CALLS.append(("shapes", kind))
    return _shape(kind)


SYNC_TOOLS = [get_weather, fail_disk, refuse, shapes]
ASYNC_TOOLS = [get_weather_async, fail_disk_async, refuse_async, shapes_async]
REGISTERED = [*SYNC_TOOLS, get_time]
"""What the shared worker registers: the run's tools and one more (`get_time`) that runs only once added."""

PARAMS: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 1024,
    "system": "You are terse.",
    "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
}


# --- The harness: one scripted conversation through either side -----------------------------------------------------


@dataclass
class Outcome:
    """What one side did with a script: what Claude's API received, which tools ran, and the run's final message."""

    bodies: list[dict[str, Any]]
    betas: list[str | None]
    """Each request's ``anthropic-beta`` header."""
    calls: list[tuple[str, str]]
    """Sorted: the durable run runs a reply's tools concurrently, the SDK one by one."""
    final: dict[str, Any] | None


def _observed(fake: FakeMessagesAPI, final: Any) -> Outcome:
    requests = fake.requests
    return Outcome(
        bodies=[r.body for r in requests],
        betas=[r.headers.get("anthropic-beta") for r in requests],
        calls=sorted(CALLS),
        final=None if final is None else as_message(final),
    )


def as_message(message: Any) -> dict[str, Any]:
    """A reply as the API sent it, whichever side holds it (the SDK's model, or the run's response body)."""
    if isinstance(message, BetaMessage):
        message = message.model_dump(mode="json", exclude_unset=True, by_alias=True, warnings=False)
    return _without_nulls(message)


def _without_nulls(value: Any) -> Any:
    # The SDK's stream accumulator fills fields the wire never carried with null (`stop_details`, `citations`), and
    # its parsed replies carry `parsed_output`: neither is part of what the API sent.
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None and k != "parsed_output"}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


SdkBody = Callable[[Any, int, Any], Any]
"""The SDK loop's body: ``(runner, iteration, reply)``; it may return an awaitable (the async runners' ``close``)."""

DurableBody = Callable[[Run, int, Any], Awaitable[None]]
"""The same steering for a step-mode durable run: ``(run, iteration, reply)``."""


@dataclass(frozen=True)
class Steer:
    """What the application does in the loop body, on each side."""

    sdk: SdkBody
    durable: DurableBody


FLAVOURS = ("stream", "parse", "async_stream", "async_parse", "eager")
"""The SDK's runner classes: `BetaStreamingToolRunner`, `BetaToolRunner`, their async twins, and the streaming runner
with `run_tools_eagerly`."""


def _reset(fake: FakeMessagesAPI, script: list[ScriptItem]) -> None:
    fake.reset()
    CALLS.clear()
    fake.script(*script)


def _sdk_kwargs(options: dict[str, Any], thread: bool, flavour: str, function_tools: bool = True) -> dict[str, Any]:
    kwargs: dict[str, Any] = {**PARAMS, **options}
    # The SDK's 2.14.0 types no longer have the sampling parameters; a run takes them and sends them the same way.
    extra_body = {k: kwargs.pop(k) for k in ("temperature", "top_k", "top_p") if k in kwargs}
    if extra_body:
        kwargs["extra_body"] = extra_body
    own = (ASYNC_TOOLS if flavour.startswith("async") else SYNC_TOOLS) if function_tools else []
    kwargs["tools"] = [*own, *options.get("tools", [])]
    if not thread:
        kwargs["thread"] = False
    kwargs["stream"] = flavour != "parse" and flavour != "async_parse"
    if flavour == "eager":
        kwargs["run_tools_eagerly"] = True
    return kwargs


def sdk_outcome(
    fake: FakeMessagesAPI,
    script: list[ScriptItem],
    options: dict[str, Any],
    *,
    thread: bool,
    flavour: str = "stream",
    body: SdkBody | None = None,
    function_tools: bool = True,
) -> Outcome:
    """Run ``script`` through the SDK's synchronous tool runner (call it in a thread: it blocks).

    Without ``function_tools``, the runner has only the tools ``options`` names (``tools=[]`` when it names none).
    """
    assert not flavour.startswith("async")
    _reset(fake, script)
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    kwargs = _sdk_kwargs(options, thread, flavour, function_tools)
    runner = client.beta.messages.tool_runner(**kwargs)
    for iteration, item in enumerate(runner, 1):
        reply = item.get_final_message() if kwargs["stream"] else item
        if body is not None:
            body(runner, iteration, reply)
    return _observed(fake, runner.until_done())


async def async_sdk_outcome(
    fake: FakeMessagesAPI,
    script: list[ScriptItem],
    options: dict[str, Any],
    *,
    thread: bool,
    flavour: str,
    body: SdkBody | None = None,
    function_tools: bool = True,
) -> Outcome:
    """Run ``script`` through the SDK's asynchronous tool runner."""
    _reset(fake, script)
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    kwargs = _sdk_kwargs(options, thread, flavour, function_tools)
    runner = client.beta.messages.tool_runner(**kwargs)
    iteration = 0
    async for item in runner:
        iteration += 1
        reply = await item.get_final_message() if kwargs["stream"] else item
        if body is not None:
            done = body(runner, iteration, reply)
            if inspect.isawaitable(done):
                await done
    return _observed(fake, await runner.until_done())


async def any_sdk_outcome(
    fake: FakeMessagesAPI,
    script: list[ScriptItem],
    options: dict[str, Any],
    *,
    thread: bool,
    flavour: str = "stream",
    body: SdkBody | None = None,
    function_tools: bool = True,
) -> Outcome:
    kwargs = {"thread": thread, "flavour": flavour, "body": body, "function_tools": function_tools}
    if flavour.startswith("async"):
        return await async_sdk_outcome(fake, script, options, **kwargs)
    return await asyncio.to_thread(sdk_outcome, fake, script, options, **kwargs)


async def durable_outcome(
    fake: FakeMessagesAPI,
    runner: AgentRunner,
    script: list[ScriptItem],
    options: dict[str, Any],
    *,
    thread: bool,
    body: DurableBody | None = None,
    eager: bool = False,
    function_tools: bool = True,
) -> Outcome:
    """Run ``script`` through a durable run; with ``body``, in step mode, calling it for each reply."""
    _reset(fake, script)
    run_options = {k: v for k, v in options.items() if k != "tools"}
    tools = [*(SYNC_TOOLS if function_tools else []), *options.get("tools", [])]
    extra: dict[str, Any] = {"eager_tools": True} if eager else {}
    run = await runner.start(**{**PARAMS, **run_options}, tools=tools, thread=thread, step=body is not None, **extra)
    try:
        if body is not None:
            await _drive(run, body)
        result = await run.result()
    except BaseException:
        await run.terminate("the test failed")  # leave nothing running on the dev server
        raise
    return _observed(fake, result.final_message)


ENDED = ("completed", "max_iterations", "budget_exhausted", "stopped", "cancelled", "failed", "terminated", "timed_out")


async def _drive(run: Run, body: DurableBody) -> None:
    """The step-mode loop: the body for each pause, then ``advance``.

    Not `Run.steps()`: it counts the replies it yielded, compaction replies included, against ``status.iterations``,
    which leaves them out, so after a compaction it never advances again.
    """
    handled = 0
    async with asyncio.timeout(30):
        while True:
            status = await run.status()
            if status.status in ENDED:
                return
            if status.status == "waiting_for_step" and status.iterations > handled:
                handled = status.iterations
                await body(run, handled, None)
                if (await run.status()).status == "waiting_for_step":
                    await run.advance(iteration=handled)
                continue
            await asyncio.sleep(0.02)


@pytest_asyncio.fixture(scope="module")
async def parity_runner(temporal_env: WorkflowEnvironment, fake_server: FakeMessagesAPI) -> AsyncIterator[AgentRunner]:
    """One worker for every case of this module (a worker per case would cost more than the cases)."""
    task_queue = f"parity-{uuid.uuid4()}"
    worker = build_worker(
        temporal_env.client,
        registry=ToolRegistry(REGISTERED),
        task_queue=task_queue,
        claude=ClaudeActivities(anthropic_client_factory(fake_server)),
    )
    async with worker:
        yield AgentRunner(temporal_env.client, task_queue=task_queue)


def assert_same(actual: Outcome, expected: Outcome) -> None:
    """Identical request bodies and beta headers, identical tool calls, the identical final message."""
    assert actual.bodies == expected.bodies
    assert actual.betas == expected.betas
    assert actual.calls == expected.calls
    assert actual.final == expected.final


# --- Scripts --------------------------------------------------------------------------------------------------------


def weather(tool_id: str, city: str = "Paris") -> dict[str, Any]:
    return tool_use(tool_id, "get_weather", {"city": city})


def server_tool_use(tool_id: str) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tool_id, "name": "web_search", "input": {"query": "paris weather"}}


EXPIRES = "2027-01-01T00:00:00Z"
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}

FALLBACK_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "iterations": [{"type": "fallback_message", "input_tokens": 10, "output_tokens": 5}],
}


@dataclass(frozen=True)
class Case:
    """A scripted conversation, the run's options, and how the loop body steers it (if it does)."""

    script: list[ScriptItem]
    options: dict[str, Any] = field(default_factory=dict)
    steer: Steer | None = None
    thread_only: bool = False
    xfail: dict[str, str] = field(default_factory=dict)
    """Wire mode (``thread`` / ``full_history``) -> the known difference, where the durable run differs."""
    function_tools: bool = True
    """Whether the runner has the module's function tools; without them, only the tools the options name."""


def at(iteration: int, sdk: Callable[[Any], Any], durable: Callable[[Run], Awaitable[Any]]) -> Steer:
    """Steer in the loop body of one iteration only: ``sdk(runner)`` on the SDK's side, ``durable(run)`` on ours."""

    def sdk_body(runner: Any, i: int, _reply: Any) -> Any:
        return sdk(runner) if i == iteration else None

    async def durable_body(run: Run, i: int, _reply: Any) -> None:
        if i == iteration:
            await durable(run)

    return Steer(sdk_body, durable_body)


INLINE_TOOLS = {"betas": [INLINE_TOOLS_BETA]}
COMPACT_BETA = "compact-2026-09-04"
SERVER_WEATHER = {"name": "get_weather", "description": "The server's weather.", "input_schema": {"type": "object"}}
"""A raw definition under the name of a function tool the runner has."""

REMOVAL_OF_WEATHER = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}}
ADDITION_OF_WEATHER = {
    "type": "tool_addition",
    "tool": {"type": "tool_definition", "definition": get_weather.to_dict()},
}
REMOVE_WEATHER = at(1, lambda r: r.remove_tools("get_weather"), lambda run: run.remove_tools("get_weather"))
COMPACT = at(1, lambda r: r.compact_before_next_turn(), lambda run: run.compact())


def both(reason: str) -> dict[str, str]:
    return {"thread": reason, "full_history": reason}


CASES: dict[str, Case] = {
    # -- stop rules (_STOP_REASON_STEPS) --
    "end_turn": Case([end_turn("Sunny.")]),
    "end_turn_with_tool_use_runs_nothing": Case([Reply([text("Done."), weather("toolu_S1")], "end_turn")]),
    "stop_sequence": Case([Reply([text("Sunny")], "stop_sequence", stop_sequence="###")], {"stop_sequences": ["###"]}),
    "max_tokens_with_tool_use": Case([Reply([weather("toolu_M1")], "max_tokens")]),
    "context_window_exceeded_with_tool_use": Case([Reply([weather("toolu_W1")], "model_context_window_exceeded")]),
    "refusal_with_tool_use": Case([Reply([weather("toolu_R1")], "refusal")]),
    "absent_stop_reason": Case([Reply([weather("toolu_N1")], None)]),
    "unknown_stop_reason": Case([Reply([weather("toolu_F1")], "a_future_reason")]),
    "tool_use_without_a_client_tool": Case(
        [Reply([server_tool_use("srvtoolu_1")], "tool_use")], {"tools": [WEB_SEARCH]}
    ),
    "tool_use_without_content": Case([Reply([], "tool_use")]),
    "pause_turn_resumes": Case([Reply([server_tool_use("srvtoolu_2")], "pause_turn"), end_turn("Found.")]),
    "compaction_stop_resumes": Case(
        [Reply([{"type": "compaction", "content": "Summary: Paris."}], "compaction"), end_turn("Sunny.")]
    ),
    # -- max_iterations (_should_stop), counted per reply, pause_turn included --
    "max_iterations_runs_the_last_tools": Case(
        [Reply([weather("toolu_I1")], "tool_use"), Reply([weather("toolu_I2", "Oslo")], "tool_use")],
        {"max_iterations": 2},
    ),
    "max_iterations_counts_pause_turn": Case(
        [Reply([server_tool_use("srvtoolu_3")], "pause_turn"), Reply([weather("toolu_I3")], "tool_use")],
        {"max_iterations": 2},
    ),
    # -- tool results (_generate_tool_call_response, _run_tool, tool_result_content, tool_error_content) --
    "results_in_block_order": Case(
        [
            Reply(
                [
                    text("Checking."),
                    weather("toolu_P1"),
                    tool_use("toolu_P2", "fail_disk", {"path": "/d"}),
                    tool_use("toolu_P3", "refuse", {"reason": "policy"}),
                    tool_use("toolu_P4", "no_such_tool", {}),
                    tool_use("toolu_P5", "get_time", {"city": "Paris"}),
                    weather("toolu_P6", "Oslo"),
                ],
                "tool_use",
            ),
            end_turn("ok"),
        ]
    ),
    "result_shapes": Case(
        [
            Reply(
                [
                    tool_use("toolu_H1", "shapes", {"kind": "none"}),
                    tool_use("toolu_H2", "shapes", {"kind": "blocks"}),
                    tool_use("toolu_H3", "shapes", {"kind": "surrogate"}),
                ],
                "tool_use",
            ),
            end_turn("ok"),
        ]
    ),
    "raw_definition_is_sent_and_never_run": Case(
        [Reply([tool_use("toolu_D1", "lookup", {"q": "x"})], "tool_use"), end_turn("ok")],
        {"tools": [{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}}]},
    ),
    "multi_turn": Case(
        [
            Reply([weather("toolu_T1")], "tool_use"),
            Reply([text("And Oslo:"), weather("toolu_T2", "Oslo")], "tool_use"),
            end_turn("done"),
        ]
    ),
    # -- request fields --
    "params_pass_through": Case(
        [Reply([weather("toolu_Q1")], "tool_use"), end_turn("ok")],
        {
            "tool_choice": {"type": "auto"},
            "metadata": {"user_id": "u-1"},
            "temperature": 0.5,
            "stop_sequences": ["###"],
            "thinking": {"type": "enabled", "budget_tokens": 512},
            "betas": ["some-beta-2026-01-01"],
        },
    ),
    "betas_with_the_fallback_credit_one_of_the_callers_own": Case(
        [Reply([weather("toolu_Q2")], "tool_use"), end_turn("ok")],
        {"betas": ["some-beta-2026-01-01", FALLBACK_CREDIT_BETA, "other-beta-2026-02-02"]},
    ),
    "betas_empty": Case([Reply([weather("toolu_Q3")], "tool_use"), end_turn("ok")], {"betas": []}),
    # -- no tools: the SDK's runner always has a tool list, so a create (or a turn without a thread) sends `[]` --
    "no_tools": Case([Reply([server_tool_use("srvtoolu_E1")], "pause_turn"), end_turn("Found.")], function_tools=False),
    "no_tools_replays_a_lost_thread": Case(
        [Reply([server_tool_use("srvtoolu_E2")], "pause_turn"), ThreadNotFound(), end_turn("Found.")],
        thread_only=True,
        function_tools=False,
    ),
    "no_tools_goes_unthreaded": Case(
        [ThreadUnsupported(("fallbacks",)), Reply([server_tool_use("srvtoolu_E3")], "pause_turn"), end_turn("ok")],
        thread_only=True,
        function_tools=False,
    ),
    "no_tools_compaction": Case(
        [end_turn("Sunny."), Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction")],
        {"betas": [COMPACT_BETA]},
        steer=COMPACT,
        function_tools=False,
    ),
    "no_tools_until_add_tools": Case(
        [Reply([tool_use("toolu_E4", "get_time", {"city": "Oslo"})], "tool_use"), end_turn("ok")],
        INLINE_TOOLS,
        steer=at(1, lambda r: r.add_tools(get_time), lambda run: run.add_tools(get_time)),
        function_tools=False,
    ),
    "container_given_without_id_gets_the_replys": Case(
        [
            Reply(
                [weather("toolu_C1")], "tool_use", container={"id": "container_7", "expires_at": "2027-01-01T00:00:00Z"}
            ),
            end_turn("ok"),
        ],
        {"container": {"skills": [{"type": "anthropic", "skill_id": "xlsx"}]}},
    ),
    "container_named_stays": Case(
        [
            Reply(
                [weather("toolu_C2")], "tool_use", container={"id": "container_8", "expires_at": "2027-01-01T00:00:00Z"}
            ),
            end_turn("ok"),
        ],
        {"container": "container_mine"},
    ),
    # -- threads (_thread_state.py) --
    "thread_not_found_replays_without_cache_control": Case(
        [Reply([weather("toolu_L1")], "tool_use"), ThreadNotFound(), end_turn("ok")],
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}}],
                }
            ]
        },
        thread_only=True,
    ),
    "thread_already_continued_replays": Case(
        [
            Reply([weather("toolu_L2")], "tool_use"),
            Fault(409, body=error_body(409, "already continued", error_code="thread_already_continued")),
            end_turn("ok"),
        ],
        thread_only=True,
    ),
    "thread_continue_in_flight_replays": Case(
        [
            Reply([weather("toolu_L5")], "tool_use"),
            Fault(409, body=error_body(409, "in flight", error_code="thread_continue_in_flight")),
            end_turn("ok"),
        ],
        thread_only=True,
    ),
    "thread_lost_again_after_a_replay_goes_unthreaded": Case(
        [
            Reply([weather("toolu_L3")], "tool_use"),
            ThreadNotFound(),
            Reply([weather("toolu_L4", "Oslo")], "tool_use"),
            ThreadNotFound(),
            end_turn("ok"),
        ],
        thread_only=True,
    ),
    "thread_unsupported_goes_unthreaded": Case(
        [ThreadUnsupported(("fallbacks",)), Reply([weather("toolu_U1")], "tool_use"), end_turn("ok")],
        thread_only=True,
    ),
    "thread_unsupported_on_a_continue_goes_unthreaded": Case(
        [Reply([weather("toolu_U2")], "tool_use"), ThreadUnsupported(("fallbacks",)), end_turn("ok")],
        thread_only=True,
    ),
    "thread_lost_later_after_a_replay_replays_again": Case(
        [
            Reply([weather("toolu_L6")], "tool_use"),
            ThreadNotFound(),
            Reply([weather("toolu_L7", "Oslo")], "tool_use"),
            Reply([weather("toolu_L8", "Rome")], "tool_use"),
            ThreadNotFound(),
            end_turn("ok"),
        ],
        thread_only=True,
    ),
    "fallback_reply_starts_a_new_thread": Case(
        [Reply([weather("toolu_B1")], "tool_use", usage=FALLBACK_USAGE), end_turn("ok")],
        thread_only=True,
    ),
    # -- tool availability follows the conversation (_tool_dispatch.available_tool_names) --
    "tool_removed_in_the_messages_is_not_found": Case(
        [Reply([weather("toolu_A1")], "tool_use"), end_turn("ok")],
        {
            "messages": [*PARAMS["messages"], {"role": "system", "content": [REMOVAL_OF_WEATHER]}],
            "betas": [INLINE_TOOLS_BETA],
        },
    ),
    "tool_removed_and_added_back_in_the_messages_runs": Case(
        [Reply([weather("toolu_A2")], "tool_use"), end_turn("ok")],
        {
            "messages": [
                *PARAMS["messages"],
                {"role": "system", "content": [REMOVAL_OF_WEATHER]},
                {"role": "system", "content": [ADDITION_OF_WEATHER]},
            ],
            "betas": [INLINE_TOOLS_BETA],
        },
    ),
    "tool_removed_by_a_compaction_in_the_turn_is_not_found": Case(
        [
            Reply([{"type": "compaction", "content": "Summary.", "tool_changes": [REMOVAL_OF_WEATHER]}], "compaction"),
            Reply([weather("toolu_A3")], "tool_use"),
            end_turn("ok"),
        ],
        {"betas": [COMPACT_BETA]},
    ),
    # -- message shapes 2.14.0's types take --
    "system_message_with_output_config_only": Case(
        [Reply([weather("toolu_O1")], "tool_use"), end_turn("ok")],
        {"messages": [*PARAMS["messages"], {"role": "system", "output_config": {"effort": "low"}}]},
    ),
    "system_message_with_clear_at": Case(
        [Reply([weather("toolu_O2")], "tool_use"), end_turn("ok")],
        {
            "messages": [
                *PARAMS["messages"],
                {"role": "system", "clear_at": "next_user_message", "content": "Be brief."},
            ]
        },
    ),
    # -- the loop body's controls (add_tools, remove_tools, set_messages_params, close, compact_before_next_turn) --
    "remove_tools_withdraws_the_replys_own_calls": Case(
        [Reply([weather("toolu_X1")], "tool_use"), Reply([weather("toolu_X2", "Oslo")], "tool_use"), end_turn("ok")],
        INLINE_TOOLS,
        steer=REMOVE_WEATHER,
    ),
    "add_tools_runs_the_replys_call_at_once": Case(
        [Reply([tool_use("toolu_X3", "get_time", {"city": "Oslo"})], "tool_use"), end_turn("ok")],
        INLINE_TOOLS,
        steer=at(1, lambda r: r.add_tools(get_time), lambda run: run.add_tools(get_time)),
    ),
    "add_tools_raw_definition_stops_running_the_function_tool": Case(
        [Reply([weather("toolu_X4")], "tool_use"), Reply([weather("toolu_X5")], "tool_use"), end_turn("ok")],
        INLINE_TOOLS,
        steer=at(1, lambda r: r.add_tools(SERVER_WEATHER), lambda run: run.add_tools(SERVER_WEATHER)),
    ),
    "tool_changes_wait_out_a_pause_turn": Case(
        [
            Reply([server_tool_use("srvtoolu_4")], "pause_turn"),
            Reply([weather("toolu_X6")], "tool_use"),
            end_turn("ok"),
        ],
        INLINE_TOOLS,
        steer=REMOVE_WEATHER,
    ),
    "set_messages_params_for_later_turns": Case(
        [Reply([weather("toolu_X7")], "tool_use"), end_turn("ok")],
        steer=at(
            1,
            lambda r: r.set_messages_params(lambda p: {**p, "max_tokens": 256}),
            lambda run: run.update_params(max_tokens=256),
        ),
    ),
    "close_runs_no_more_tools": Case(
        [Reply([weather("toolu_X8")], "tool_use"), end_turn("never sent")],
        steer=at(1, lambda r: r.close(), lambda run: run.stop()),
    ),
    "compaction_between_turns_is_not_an_iteration": Case(
        [
            Reply([weather("toolu_X9")], "tool_use"),
            Reply([{"type": "compaction", "content": "Summary: sunny in Paris."}], "compaction"),
            Reply([weather("toolu_X10", "Oslo")], "tool_use"),
        ],
        {"max_iterations": 2, "betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_request_drops_what_shapes_a_reply": Case(
        [
            Reply([weather("toolu_Y3")], "tool_use"),
            Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction"),
            end_turn("ok"),
        ],
        {
            "betas": [COMPACT_BETA],
            "stop_sequences": ["###"],
            "tool_choice": {"type": "any"},
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        },
        steer=COMPACT,
    ),
    "generate_tool_call_response_is_cached": Case(
        [Reply([weather("toolu_Y4")], "tool_use"), end_turn("ok")],
        steer=at(
            1,
            lambda r: [r.generate_tool_call_response(), r.generate_tool_call_response()],
            lambda _run: asyncio.sleep(0),  # a run's loop body cannot run the tools itself
        ),
    ),
    "compaction_without_a_summary_keeps_the_history": Case(
        [
            Reply([weather("toolu_Y1")], "tool_use"),
            Reply([{"type": "compaction", "content": None}], "compaction"),
            end_turn("ok"),
        ],
        {"betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_waits_out_a_pause_turn": Case(
        [
            Reply([server_tool_use("srvtoolu_5")], "pause_turn"),
            Reply([weather("toolu_Y5")], "tool_use"),
            Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction"),
            end_turn("ok"),
        ],
        {"betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_after_the_last_iteration_is_not_sent": Case(
        [Reply([weather("toolu_Y6")], "tool_use"), Reply([{"type": "compaction", "content": "S."}], "compaction")],
        {"max_iterations": 1, "betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_after_a_final_turn": Case(
        [end_turn("Sunny."), Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction")],
        {"betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_after_a_final_turn_at_max_iterations": Case(
        [end_turn("Sunny."), Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction")],
        {"max_iterations": 1, "betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_without_a_summary_after_a_final_turn_ends_on_the_turn": Case(
        [end_turn("Sunny."), Reply([{"type": "compaction", "content": None}], "compaction")],
        {"betas": [COMPACT_BETA]},
        steer=COMPACT,
    ),
    "compaction_after_unanswered_tool_calls_is_skipped": Case(
        [Reply([weather("toolu_Y2")], "max_tokens")], {"betas": [COMPACT_BETA]}, steer=COMPACT
    ),
}


@pytest.mark.parametrize(
    ("name", "thread"),
    [
        pytest.param(name, thread, id=f"{name}-{'thread' if thread else 'full_history'}")
        for name, case in CASES.items()
        for thread in (True, False)
        if thread or not case.thread_only  # a thread rejection: only threaded requests get one
    ],
)
async def test_each_branch_sends_what_the_sdk_sends(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI, name: str, thread: bool, request: pytest.FixtureRequest
) -> None:
    case = CASES[name]
    mode = "thread" if thread else "full_history"
    if mode in case.xfail:
        request.applymarker(pytest.mark.xfail(strict=True, reason=case.xfail[mode]))
    steer = case.steer
    tools = case.function_tools
    expected = await any_sdk_outcome(
        fake_api, case.script, case.options, thread=thread, body=steer and steer.sdk, function_tools=tools
    )
    actual = await durable_outcome(
        fake_api,
        parity_runner,
        case.script,
        case.options,
        thread=thread,
        body=steer and steer.durable,
        function_tools=tools,
    )
    assert_same(actual, expected)


FLAVOUR_SCRIPT: list[ScriptItem] = [
    Reply(
        [
            text("Checking."),
            weather("toolu_V1"),
            tool_use("toolu_V2", "fail_disk", {"path": "/d"}),
            tool_use("toolu_V3", "refuse", {"reason": "policy"}),
            tool_use("toolu_V4", "no_such_tool", {}),
        ],
        "tool_use",
    ),
    Reply([server_tool_use("srvtoolu_V")], "pause_turn"),
    Reply([text("And Oslo:"), weather("toolu_V5", "Oslo")], "tool_use"),
    end_turn("done"),
]
"""Every kind of result, a resumed pause, and three turns of tools: what each runner class must handle alike."""


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_every_runner_class_gets_the_same_requests_as_a_durable_run(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI, flavour: str, thread: bool
) -> None:
    """Sync and async, streaming and not, eager or not: one durable run stands for all of them.

    A durable run always streams (each event heartbeats its model call), so against the non-streaming runners its
    bodies differ in ``"stream": true`` alone.
    """
    expected = await any_sdk_outcome(fake_api, FLAVOUR_SCRIPT, {}, thread=thread, flavour=flavour)
    actual = await durable_outcome(fake_api, parity_runner, FLAVOUR_SCRIPT, {}, thread=thread, eager=flavour == "eager")
    if flavour.endswith("parse"):
        assert all(body.pop("stream") is True for body in actual.bodies)
        assert all("stream" not in body for body in expected.bodies)
    assert len(expected.bodies) == 4
    assert expected.calls == [
        ("fail_disk", "/d"),
        ("get_weather", "Oslo"),
        ("get_weather", "Paris"),
        ("refuse", "policy"),
    ]
    assert_same(actual, expected)


INJECT_SCRIPT: list[ScriptItem] = [Reply([weather("toolu_G1")], "tool_use"), end_turn("Il fait beau.")]


def _sdk_injects(runner: Any, iteration: int, reply: Any) -> None:
    """The SDK's documented way to add to the tool results: `append_messages(reply, results + text)`."""
    if iteration == 1:
        results = runner.generate_tool_call_response()
        runner.append_messages(reply, {"role": "user", "content": [*results["content"], text("Answer in French.")]})


async def _durable_injects(run: Run, iteration: int, _reply: Any) -> None:
    if iteration == 1:
        await run.inject("Answer in French.")


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_inject_sends_what_append_messages_sends_and_runs_the_tools_once(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """Deliberate difference: the SDK's `append_messages` clears its cached results, so it runs the tools again after
    the loop body (Pitfalls 1, `g2`); `inject` joins the results' message and the tools run once."""
    steer = Steer(_sdk_injects, _durable_injects)
    expected = await any_sdk_outcome(fake_api, INJECT_SCRIPT, {}, thread=thread, body=steer.sdk)
    actual = await durable_outcome(fake_api, parity_runner, INJECT_SCRIPT, {}, thread=thread, body=steer.durable)
    assert expected.calls == [("get_weather", "Paris"), ("get_weather", "Paris")]
    assert actual.calls == [("get_weather", "Paris")]
    assert actual.bodies[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_G1", "content": "sunny, 21C in Paris"},
            {"type": "text", "text": "Answer in French."},
        ],
    }
    assert_same(actual, Outcome(expected.bodies, expected.betas, actual.calls, expected.final))


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_retry_resends_the_turn_without_running_the_dropped_replys_tools(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """Deliberate difference: the SDK's retry idiom (`append_messages()` with nothing) still runs the dropped reply's
    tools (Pitfalls 3, `g3`); `retry` never runs them. The requests are the same: the turn again (on a thread, a new
    `create`), then the second reply's."""
    script: list[ScriptItem] = [
        Reply([tool_use("toolu_G2", "get_weather", {"city": "Lyon"})], "tool_use"),
        Reply([weather("toolu_G3")], "tool_use"),
        end_turn("ok"),
    ]
    steer = at(1, lambda r: r.append_messages(), lambda run: run.retry())
    expected = await any_sdk_outcome(fake_api, script, {}, thread=thread, body=steer.sdk)
    actual = await durable_outcome(fake_api, parity_runner, script, {}, thread=thread, body=steer.durable)
    assert expected.calls == [("get_weather", "Lyon"), ("get_weather", "Paris")]
    assert actual.calls == [("get_weather", "Paris")]
    assert actual.bodies[1]["messages"] == expected.bodies[0]["messages"]
    assert_same(actual, Outcome(expected.bodies, expected.betas, actual.calls, expected.final))


def _with_thread_api(fake: FakeMessagesAPI, script: list[ScriptItem], body: Callable[[Any, int], None]) -> Outcome:
    """The SDK's thread API: `client.beta.messages.thread(...)`, then `thread.tool_runner()`; ``body(thread, i)``."""
    _reset(fake, script)
    client = anthropic.Anthropic(base_url=fake.url, api_key="test-key", max_retries=0)
    params = {k: v for k, v in PARAMS.items()}
    thread = client.beta.messages.thread(**params, tools=SYNC_TOOLS)
    runner = thread.tool_runner(stream=True)
    for iteration, stream in enumerate(runner, 1):
        stream.get_final_message()
        body(thread, iteration)
    return _observed(fake, runner.until_done())


async def test_a_message_added_while_a_reply_calls_only_server_tools_keeps_the_loop_going(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """`_beta_runner.py:750`: a `tool_use` reply with no client tool call ends the loop unless the thread was given
    messages meanwhile (`thread.append`); `inject` does the same."""
    script: list[ScriptItem] = [Reply([server_tool_use("srvtoolu_A")], "tool_use"), end_turn("ok")]
    please = [text("And in Oslo?")]

    def sdk_body(thread: Any, iteration: int) -> None:
        if iteration == 1:
            thread.append({"role": "user", "content": please})

    async def durable_body(run: Run, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            await run.inject(please)

    expected = await asyncio.to_thread(_with_thread_api, fake_api, script, sdk_body)
    actual = await durable_outcome(fake_api, parity_runner, script, {}, thread=True, body=durable_body)
    assert [b["messages"] for b in expected.bodies][1] == [{"role": "user", "content": please}]
    assert_same(actual, expected)


async def test_a_system_change_on_a_thread_is_refused(parity_runner: AgentRunner, fake_api: FakeMessagesAPI) -> None:
    """Deliberate difference: the SDK raises `AnthropicError` out of the loop once the body changed `system` on a
    thread (`_beta_runner.py:737`, `_thread_state.py:507-521`), before the reply's tools run, and the runner is done;
    a run refuses the `update_params` edit itself, saying what to do, and goes on unchanged."""
    script: list[ScriptItem] = [Reply([weather("toolu_Z1")], "tool_use"), end_turn("ok")]
    steer = at(1, lambda r: r.set_messages_params(lambda p: {**p, "system": "Be verbose."}), lambda run: run.stop())
    with pytest.raises(anthropic.AnthropicError, match="Cannot change `system` on a thread"):
        await any_sdk_outcome(fake_api, script, {}, thread=True, body=steer.sdk)
    assert CALLS == []
    refused: list[str] = []

    async def durable_body(run: Run, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            with pytest.raises(EditRejected) as e:
                await run.update_params(system="Be verbose.")
            refused.append(str(e.value))

    actual = await durable_outcome(fake_api, parity_runner, script, {}, thread=True, body=durable_body)
    expected = await any_sdk_outcome(fake_api, script, {}, thread=True)
    assert refused == [
        "update_params was refused: Cannot change `system` on a thread: the server keeps the one the thread was "
        "created with. To change it, start a new run with `thread: false` or from this run's transcript."
    ]
    assert_same(actual, expected)


async def test_after_a_refusal_on_a_thread_the_conversation_goes_on_without_the_refused_turn(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """`_thread_state.py:314-317`: a refused turn starts a new thread and is not part of the history. The SDK goes on
    with `thread.append` and a new `thread.tool_runner()`; a run with a message injected at the refusal."""
    script: list[ScriptItem] = [
        Reply([weather("toolu_K1")], "tool_use"),
        Reply([text("No.")], "refusal"),
        end_turn("ok"),
    ]
    please = [text("Please?")]

    def sdk_side() -> Outcome:
        _reset(fake_api, script)
        client = anthropic.Anthropic(base_url=fake_api.url, api_key="test-key", max_retries=0)
        thread = client.beta.messages.thread(**PARAMS, tools=SYNC_TOOLS)
        thread.tool_runner(stream=True).until_done()
        thread.append({"role": "user", "content": please})
        return _observed(fake_api, thread.tool_runner(stream=True).until_done())

    async def durable_body(run: Run, iteration: int, _reply: Any) -> None:
        if iteration == 2:
            await run.inject(please)

    expected = await asyncio.to_thread(sdk_side)
    actual = await durable_outcome(fake_api, parity_runner, script, {}, thread=True, body=durable_body)
    assert [b["thread"]["type"] for b in expected.bodies] == ["create", "continue", "create"]
    # `inject` joins the message holding the tool results (a deliberate difference): join the SDK's two the same way.
    *before, results, message = expected.bodies[2]["messages"]
    assert message == {"role": "user", "content": please}
    expected.bodies[2]["messages"] = [*before, {"role": "user", "content": [*results["content"], *please]}]
    assert_same(actual, expected)


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_eager_tools_start_a_call_once_the_model_moved_on_from_it(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """`EagerToolCalls.track` (_beta_runner.py:1711-1736): a call runs early once the next block starts or the reply
    stops with `tool_use`, never on its own `content_block_stop`, which a reply cut off by `max_tokens` sends for a
    call whose input may be cut short. So of a `max_tokens` reply's two calls only the first runs (its result is never
    sent: the reply stops the loop)."""
    cut = Reply([weather("toolu_E1"), weather("toolu_E2", "Oslo")], "max_tokens")
    script: list[ScriptItem] = [SlowStream(cut, event_delay=0.05)]
    expected = await any_sdk_outcome(fake_api, script, {}, thread=thread, flavour="eager")
    actual = await durable_outcome(fake_api, parity_runner, script, {}, thread=thread, eager=True)
    assert expected.calls == [("get_weather", "Paris")]
    assert_same(actual, expected)


async def test_a_compaction_param_is_refused_at_start_as_the_sdk_refuses_it(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """`_reject_compaction_param` (_beta_runner.py:134-140): every request would compact again. The SDK's
    `tool_runner()` does not even take the keyword; a run refuses it, pointing at compaction between turns."""
    client = anthropic.Anthropic(base_url=fake_api.url, api_key="test-key", max_retries=0)
    with pytest.raises(TypeError, match="compaction"):
        client.beta.messages.tool_runner(**PARAMS, tools=SYNC_TOOLS, compaction={"type": "summarize"})
    with pytest.raises(InvalidRunInput, match="Ask for compaction between turns instead"):
        run = await parity_runner.start(**PARAMS, tools=SYNC_TOOLS, compaction={"type": "summarize"})
        await run.result()
    assert fake_api.bodies() == []


async def test_a_compaction_is_refused_while_context_management_compacts(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """`_check_can_compact` (_beta_runner.py:379-389): the API takes no compaction block beside a compaction edit."""
    options = {"context_management": {"edits": [{"type": "compact_20260112"}]}, "betas": [COMPACT_BETA]}
    script: list[ScriptItem] = [Reply([weather("toolu_J1")], "tool_use"), end_turn("ok")]
    refused: list[str] = []

    def sdk_body(runner: Any, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            with pytest.raises(ValueError, match="can't be used while `context_management` has a compaction edit"):
                runner.compact_before_next_turn()

    async def durable_body(run: Run, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            with pytest.raises(EditRejected) as e:
                await run.compact()
            refused.append(str(e.value))

    expected = await any_sdk_outcome(fake_api, script, options, thread=True, body=sdk_body)
    actual = await durable_outcome(fake_api, parity_runner, script, options, thread=True, body=durable_body)
    assert refused == [
        "compact was refused: A compaction can't be asked for while `context_management` has a compaction edit "
        "(compact_20260112): the API doesn't accept a compaction block together with one, so the compaction request "
        "would be billed and the next request rejected. Remove the edit first "
        "(`update_params(context_management=...)`)."
    ]
    assert_same(actual, expected)


async def test_a_compaction_edit_is_refused_while_a_compaction_waits(
    parity_runner: AgentRunner, fake_api: FakeMessagesAPI
) -> None:
    """`set_messages_params` checks a pending compaction (`_beta_runner.py:314-315`): adding a `compact_` edit to
    `context_management` then raises; a run refuses the `update_params` edit, and the compaction goes ahead."""
    options = {"betas": [COMPACT_BETA]}
    compacting = {"edits": [{"type": "compact_20260112"}]}
    script: list[ScriptItem] = [
        Reply([weather("toolu_J2")], "tool_use"),
        Reply([{"type": "compaction", "content": "Summary: sunny."}], "compaction"),
        end_turn("ok"),
    ]
    refused: list[str] = []

    def sdk_body(runner: Any, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            runner.compact_before_next_turn()
            with pytest.raises(ValueError, match="can't be used while `context_management` has a compaction edit"):
                runner.set_messages_params(lambda p: {**p, "context_management": compacting})

    async def durable_body(run: Run, iteration: int, _reply: Any) -> None:
        if iteration == 1:
            await run.compact()
            with pytest.raises(EditRejected) as e:
                await run.update_params(context_management=compacting)
            refused.append(str(e.value))

    expected = await any_sdk_outcome(fake_api, script, options, thread=True, body=sdk_body)
    actual = await durable_outcome(fake_api, parity_runner, script, options, thread=True, body=durable_body)
    assert refused == [
        "update_params was refused: `context_management` can't get a compaction edit (compact_20260112) while a "
        "compaction is queued: the API doesn't accept a compaction block together with one. Send it once the "
        "compaction has applied."
    ]
    assert [("compaction" in body) for body in actual.bodies] == [False, True, False]
    assert_same(actual, expected)
