"""What travels between the client, the workflow and the activities: names, inputs, outputs.

Every model here is part of a durable contract: a running workflow's history holds them serialized, so a field may
only ever be added, with a default. Messages and content blocks stay plain JSON dicts in the Messages API's own wire
shape, so that nothing is lost or reshaped between Claude and the transcript.

This module is imported by workflow code, so it holds no I/O.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from agent_runner.contract.agents import AgentSpec

TASK_QUEUE = "agent-runner"
"""The default task queue of runs, model calls and tools."""

WORKER_ROLES = ("workflows", "model", "tools")
"""What a worker can serve; a fleet may split them across processes and task queues."""

TOOLS_ENV = "AGENT_RUNNER_TOOLS"
"""Comma-separated tool modules a worker registers, in addition to ``--tools``."""

MCP_CONFIG_ENV = "AGENT_RUNNER_MCP_CONFIG"
"""The path of the worker's MCP configuration file, when ``--mcp-config`` is not given."""

WORKFLOW_TYPE = "AgentRun"
"""The workflow type of a run, as the stock ``temporal`` CLI names it."""

CREATE_MESSAGE_ACTIVITY = "agent_runner.create_message"
RUN_TOOL_ACTIVITY = "agent_runner.run_tool"
RUN_LOCAL_TOOL_ACTIVITY = "agent_runner.run_local_tool"
"""Runs a ``local`` tool's call as a local activity on the worker running the run; every worker that runs runs
registers it, so a history's marker replays on any of them (one that does not run the tool refuses the call, which then
goes to ``RUN_TOOL_ACTIVITY`` through the queue)."""
DESCRIBE_TOOLS_ACTIVITY = "agent_runner.describe_tools"
PROCESS_RESULTS_ACTIVITY = "agent_runner.process_results"
RECONCILE_TOOL_ACTIVITY = "agent_runner.reconcile_tool"
"""Asks an ``at_most_once`` tool's ``reconcile`` function whether a call whose outcome is unknown took effect."""
LIST_MCP_TOOLS_ACTIVITY = "agent_runner.list_mcp_tools"
"""Lists the tools of the MCP servers a run names, once, so the run's list is pinned in its history."""
CALL_MCP_TOOL_ACTIVITY = "agent_runner.call_mcp_tool"
"""Calls one tool of an MCP server the workers connect to (``activities/mcp.py``)."""
DECIDE_BUDGET_ACTIVITY = "agent_runner.decide_budget"
"""Runs a run's budget policy over its request for more budget, before a person is asked
(``activities/budget_policies.py``)."""
CHILD_USAGE_ACTIVITY = "agent_runner.child_usage"
"""Reads what a child run that ended without a result spent (its status's ``usage``), to charge it to its parent."""
CHECK_TOOL_INPUT_ACTIVITY = "agent_runner.check_tool_input"
"""Checks a person's edited input for a waiting tool call against the tool's ``input_schema``, which the run holds by
reference (``contract/tool_input.py``); a local activity of ``approve_tool``."""

TOOL_NOT_STARTED_ERROR = "ToolNotStarted"
"""The ``ApplicationError.type`` of a tool attempt that failed before the tool's own code ran (its stored input could
not be read, say): running it again cannot repeat an effect, so even an ``at_most_once`` call is retried."""

TOOL_TIMEOUT_GRACE = timedelta(seconds=10)
"""Added to a tool's ``start_to_close_timeout`` when its activity is scheduled: the worker enforces the tool's own
timeout and reports it, so Temporal's timeout only fires for a worker that stopped answering."""

ToolEffects = Literal["idempotent", "at_most_once"]
"""What running a tool twice for one ``tool_use`` would do (``tool_options(effects=...)``)."""

OnUnknown = Literal["reconcile", "ask", "tell"]
"""What an ``at_most_once`` call whose outcome is unknown becomes: its ``reconcile`` function's answer, a person's
decision (the approval machinery), or an ``is_error`` result telling Claude plainly."""

EVENTS_TOPIC = "events"
"""The Workflow Streams topic a run publishes its live events on (``contract/events.py`` describes them)."""

TOOL_USE_READY_SIGNAL = "tool_use_ready"
"""Sent by a streaming model call with ``eager_tools`` when a ``tool_use`` block's input is complete, so the run
starts the tool before the reply ends (the SDK's ``run_tools_eagerly``)."""

STOP_FROM_PARENT_SIGNAL = "stop_from_parent"
"""Signal a parent sends its running children when it is stopped: the child stops at its next step, as on ``stop``
(a workflow cannot send an update). Its argument is the reason, a string."""

STATUS_QUERY = "status"
REPLIES_QUERY = "replies"
TRANSCRIPT_QUERY = "transcript"
FORK_POINT_QUERY = "fork_point"
SEND_POINT_QUERY = "send_point"
"""What a new run continuing an ended run's conversation starts from (``Run.send``)."""

MESSAGE_THREADS_BETA = "message-threads-2026-08-12"
"""The beta a request on a server-side message thread needs, added as the SDK's tool runner adds it."""

FALLBACK_CREDIT_BETA = "fallback-credit-2026-07-01"
"""The beta a refusal needs to mint a ``fallback_credit_token`` (the fallback middleware's ``DEFAULT_BETAS``)."""

THREAD_REPLAY_CODES = ("thread_not_found", "thread_already_continued", "thread_continue_in_flight")
"""``error.details.error_code`` values after which the turn is replayed with the full history on a new thread."""

SEARCH_ATTRIBUTE_TYPES = {
    "AgentRunStatus": "Keyword",
    "AgentRunIterations": "Int",
    "AgentRunTokens": "Int",
    "AgentRunWaiting": "Keyword",
    "AgentRunModel": "Keyword",
}
"""Search attributes a run keeps current when its workers enable them (``--search-attributes``), so operators can
list and filter runs (``AgentRunWaiting = "approval"``) in the Temporal UI and ``agent-runner list --query``.
Register them first: ``temporal operator search-attribute create --name AgentRunStatus --type Keyword`` (and so
on); the embedded dev server registers them itself."""

THREAD_LOST_ERROR = "ThreadLost"
"""The ``ApplicationError.type`` of a model call whose thread the server no longer holds: the workflow replays the
full history on a new thread instead of failing."""

RunStatusName = Literal[
    "running",
    "waiting_for_approval",
    "waiting_for_step",
    "waiting_for_review",
    "sleeping",
    "completed",
    "max_iterations",
    "budget_exhausted",
    "stopped",
    "cancelled",
    "failed",
    "terminated",
    "timed_out",
]
"""Where a run is, or how it ended. The run itself reports the first eleven; ``terminated`` and ``timed_out`` (and
``failed`` or ``cancelled`` before the loop began) only Temporal knows, and the client reports them from it."""


class ActivityOptions(BaseModel):
    """How one kind of activity (the model call, or one tool) is scheduled and retried.

    The defaults suit a production run; tests shorten the heartbeat timeout so that a killed worker's attempt is
    retried within seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_to_close_timeout: timedelta = timedelta(minutes=10)
    """How long one attempt may take."""

    heartbeat_timeout: timedelta | None = timedelta(seconds=30)
    """How long an attempt may go without a heartbeat before Temporal retries it elsewhere (a crashed worker)."""

    maximum_attempts: int = Field(default=10, ge=0)
    """Attempts before the call fails for good (each model call attempt is billed, so the default is bounded); 0
    means no limit."""

    initial_interval: timedelta = timedelta(seconds=1)
    """The first retry's delay, doubled on each later retry up to ``maximum_interval``."""

    maximum_interval: timedelta = timedelta(seconds=60)
    """The longest delay between two retries."""

    task_queue: str | None = None
    """The task queue the activity runs on; ``None`` is the run's own task queue."""

    @model_validator(mode="after")
    def _in_range(self) -> ActivityOptions:
        # Checked here, once, so a run given impossible options is refused at start (InvalidRunInput) instead of
        # failing every workflow task when Temporal rejects the schedule.
        problems = []
        if self.start_to_close_timeout <= timedelta(0):
            problems.append("start_to_close_timeout must be positive")
        if self.heartbeat_timeout is not None and self.heartbeat_timeout <= timedelta(0):
            problems.append("heartbeat_timeout must be positive, or null for none")
        if self.initial_interval <= timedelta(0):
            problems.append("initial_interval must be positive")
        if self.maximum_interval < self.initial_interval:
            problems.append(
                f"maximum_interval ({self.maximum_interval}) must be at least initial_interval "
                f"({self.initial_interval})"
            )
        if self.task_queue is not None and not self.task_queue.strip():
            problems.append("task_queue must be a non-empty name, or null for the run's own")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class McpToolRef(BaseModel):
    """Where a tool of an MCP server lives.

    The server as the workers' configuration names it, and the tool's name there (the run may call it otherwise, when
    its name collides with another tool's).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: str
    tool: str


class ToolSpec(BaseModel):
    """A tool as a worker registered it: the definition sent to Claude and how its activity is scheduled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    definition: dict[str, Any]
    options: ActivityOptions = ActivityOptions()
    requires_approval: bool = False
    """Whether each call waits for a person's approval before it runs."""
    effects: ToolEffects = "idempotent"
    """``at_most_once``: a call is never run again after an attempt that may have started it (see ``on_unknown``)."""
    on_unknown: OnUnknown = "tell"
    """For ``at_most_once``: what a call whose outcome is unknown becomes."""
    # Left out of the JSON while false, as ``mcp`` below: the specs of other tools carry what they carried before.
    local: bool = Field(default=False, exclude_if=lambda local: not local)
    """A quick idempotent tool whose calls run as local activities, on the worker running the run
    (``workflows/tool_calls.py``)."""
    # Left out of the JSON while unset, so the specs of registered tools carry what they carried before.
    mcp: McpToolRef | None = Field(default=None, exclude_if=lambda ref: ref is None)
    """Set for a tool of an MCP server: its calls go to ``CALL_MCP_TOOL_ACTIVITY``."""
    agent: AgentSpec | None = Field(default=None, exclude_if=lambda agent: agent is None)
    """Set for an agent a worker registered: a call starts a child run (``workflows/subagents.py``)."""


class DescribeToolsInput(BaseModel):
    """Input of ``agent_runner.describe_tools``: the registered tools and result hooks a run names."""

    names: list[str]
    hooks: list[str] = []
    # Left out of the JSON when false, so a local lookup's input is what it was.
    hand_back: bool = Field(default=False, exclude_if=lambda hand_back: not hand_back)
    """A worker that lacks a named tool or hook hands the lookup back to the queue, for another worker of a mixed
    fleet (a rolling upgrade); only the last attempt answers with what is missing (``workflows/tool_lookup.py``)."""


class CheckToolInput(BaseModel):
    """Input of ``agent_runner.check_tool_input``: a tool's ``input_schema`` and an edited input, both as held."""

    input_schema: Any
    input: dict[str, Any]


TOOLS_NOT_HERE_ERROR = "ToolsNotRegisteredHere"
"""The ``ApplicationError.type`` of a lookup or tool call a worker hands back to the queue because it lacks a tool
another worker of the queue may have (retryable, benign)."""


NOT_SERVED_ERROR = "ActivityNotServedHere"
"""The ``ApplicationError.type`` of an activity whose last attempt reached a worker that does not serve its role
(non-retryable: ``activities/not_served.py``)."""


class DescribeToolsOutput(BaseModel):
    """The registered tools, in the order asked, and the names no worker registered."""

    # Left out of the JSON at their defaults (the answer is in every run's history).
    tools: list[ToolSpec]
    missing: list[str] = Field(default=[], exclude_if=lambda missing: not missing)
    missing_hooks: list[str] = Field(default=[], exclude_if=lambda missing: not missing)
    registered: list[str] | None = None
    """Every tool the answering worker registered, so edits naming others are refused up front."""
    model_task_queue: str | None = Field(default=None, exclude_if=lambda queue: queue is None)
    """The task queue the fleet runs model calls on, when the workers route them to a queue of their own."""
    search_attributes: bool = Field(default=False, exclude_if=lambda registered: not registered)
    """Whether the fleet registered ``SEARCH_ATTRIBUTE_TYPES``, so runs keep them current."""

    @field_serializer("tools")
    def _lean_specs(self, tools: list[ToolSpec]) -> list[dict[str, Any]]:
        # Each spec's fields at their defaults are left out (read back the same): the answer is in every run's history.
        return [spec.model_dump(mode="json", exclude_defaults=True) for spec in tools]


class FallbackSplice(BaseModel):
    """A refusal-fallback hop's splice, as ``BetaRefusalFallbackMiddleware`` streams it (``workflows/fallbacks.py``).

    The hop's request ends with ``prefill`` as a trailing assistant turn (the refused partial output, when the refusal
    granted a prefill claim); its reply is given the refused hops' output and a ``fallback`` seam block before its own
    content, the first refused reply's id, and the chain's ``usage.iterations``.
    """

    id: str
    """The id of the first refused reply, which the spliced reply keeps."""
    prefix: list[dict[str, Any]]
    """The content before the hop's own: the refused hops' output and their seams, this hop's seam last."""
    prefill: list[dict[str, Any]] = []
    """The trailing assistant turn of the hop's request; none when empty."""
    iterations: list[dict[str, Any]]
    """The ``usage.iterations`` entries of the refused hops."""
    model: str
    """The hop's model, for its ``fallback_message`` entry."""
    opened_usage: dict[str, Any] | None = None
    """The ``usage`` of the first refused hop that streamed output, whose ``message_start`` opened the spliced stream:
    the reply's usage is that one under the counts this hop's ``message_delta`` carries. ``None``: this hop's own."""
    attempt_base: int
    """Attempts of the turn's model call before this hop: the hop's live events count on from there, so a watcher
    drops what the refused hop streamed and reads the spliced reply from the start."""


class ModelTurn(BaseModel):
    """What a model call needs to build its request, with the history by reference (``contract/transcript.py``)."""

    # Fields at their defaults are left out of the JSON (here and in `CreateMessageInput`): a model call's input is
    # in the run's history every iteration, and an unset field read back is its default.
    settings: dict[str, Any] | None = Field(default=None, exclude_if=lambda settings: settings is None)
    """``{"params": …, "tools": […]}``: the request fields besides ``messages``; ``None`` when ``settings_ref``
    is already stored."""

    settings_ref: str
    head: str | None = Field(default=None, exclude_if=lambda head: head is None)
    """The stored messages: the head of their chain in the store."""

    pending: list[dict[str, Any]] = Field(default_factory=list, exclude_if=lambda pending: not pending)
    """The messages after them, not stored yet; the call stores them, and the reply after them."""

    results: list[list[Any]] = Field(default_factory=list, exclude_if=lambda results: not results)
    """A last pending message of tool results, compact: one entry a result (``contract/tool_result_refs.py``;
    ``whole_turn`` puts it back in ``pending``). Left out of the JSON when empty."""

    length: int | None = Field(default=None, exclude_if=lambda length: length is None)
    """How many messages the history holds, stored and pending. ``None`` (left out of the JSON): the call counts the
    stored ones itself, and answers lean (``contract/lean.py``), as runs since the ``lean-iteration-history`` patch
    ask."""

    # Left out of the JSON at their defaults, which every version of the model call reads back the same.
    threading: bool = Field(default=True, exclude_if=lambda threading: threading)
    answered: int | None = Field(default=None, exclude_if=lambda answered: answered is None)
    """How many of the messages the thread holds (``previous_message_id``'s). ``None`` (left out of the JSON): every
    stored one in a lean turn (``length`` left out), none in another."""
    previous_message_id: str | None = Field(default=None, exclude_if=lambda message_id: message_id is None)
    compaction: dict[str, Any] | None = Field(default=None, exclude_if=lambda compaction: compaction is None)
    """Set for a compaction request: the ``compaction`` field, sent with the full history on a new thread."""
    # Left out of the JSON while unset, so a turn dumps as it did before refusal-fallback splices.
    strip_seams: bool = Field(default=False, exclude_if=lambda strip: not strip)
    """Leave ``fallback`` seam blocks out of the messages sent (a run with ``refusal_fallbacks`` keeps them in its
    replies, and the API rejects them)."""
    splice: FallbackSplice | None = Field(default=None, exclude_if=lambda splice: splice is None)
    """Set for a refusal-fallback hop that splices its reply onto the refused ones'."""
    replay: dict[str, Any] | None = Field(default=None, exclude_if=lambda replay: replay is None)
    """A reply to store and return without calling the API: the refusal that stands when the last refusal-fallback
    hop failed, as the middleware replays it (``recommended_model`` stamped)."""


class CreateMessageInput(BaseModel):
    """Input of ``agent_runner.create_message``: one turn of the conversation."""

    turn: ModelTurn | None = None
    replies_head: str | None = Field(default=None, exclude_if=lambda head: head is None)
    """The chain of the run's replies so far; the call stores its reply after them."""

    request: dict[str, Any] = Field(default_factory=dict, exclude_if=lambda request: not request)
    """The request itself, as runs started before the transcript store sent it (kept so they can finish)."""

    run_id: str = Field(default="", exclude_if=lambda run_id: not run_id)
    """The run's workflow id; when empty (runs since issue 14 leave it out), the activity's own workflow id."""
    iteration: int = 0
    eager_tools: bool = Field(default=False, exclude_if=lambda eager: not eager)
    """Signal ``TOOL_USE_READY_SIGNAL`` to the run for each ``tool_use`` block as soon as its input is complete."""
    eager_token: str = Field(default="", exclude_if=lambda token: not token)
    """Sent back with each ``tool_use_ready`` signal: the run starts tools early only for the call it gave it to."""
    continue_cut: bool = Field(default=False, exclude_if=lambda cut: not cut)
    """A retried attempt goes on from the text a cut-off attempt kept (the run's ``continue_cut_replies``)."""


class CreateMessageOutput(BaseModel):
    """Claude's reply, as the response body carried it, its big blocks replaced by placeholders."""

    message: dict[str, Any]
    stored: bool = False
    """Whether the call stored the turn's pending messages and the reply (every call since the store does)."""
    attempt: int = 0
    """The activity attempt that got the reply, so the run knows which attempt's eagerly started tools are its."""
    opening_usage: dict[str, Any] | None = Field(default=None, exclude_if=lambda usage: usage is None)
    """A refusal's ``usage`` as its ``message_start`` carried it (``workflows/fallbacks.py``); left out otherwise."""
    as_is: bool = Field(default=False, exclude_if=lambda as_is: not as_is)
    """In a lean result (``contract/lean.py``): ``message`` is the whole reply, nothing to put back."""


class RunToolInput(BaseModel):
    """Input of ``agent_runner.run_tool``: one ``tool_use`` block to execute."""

    name: str
    tool_use_id: str
    input: Any
    run_id: str = Field(default="", exclude_if=lambda run_id: not run_id)
    """The run's workflow id; when empty (runs since issue 14 leave it out), the activity's own workflow id."""
    iteration: int = 0
    idempotency_key: str = Field(default="", exclude_if=lambda key: not key)
    """Stable for one ``tool_use`` of one run: the same across retries and continue-as-new, new in a fork
    (``idempotency_key``). Empty (left out of the JSON) when the activity derives it: a run's first execution."""


def idempotency_key(first_run_id: str, tool_use_id: str) -> str:
    """The idempotency key of the call ``tool_use_id`` in the run chain that began with ``first_run_id``.

    Continue-as-new keeps a chain's first run id, so the key is the same on every attempt and in every continuation;
    a fork is a new chain, so its calls get new keys.
    """
    return hashlib.sha256(f"{first_run_id}/{tool_use_id}".encode()).hexdigest()[:32]


class ProcessResultsInput(BaseModel):
    """Input of ``agent_runner.process_results``: one reply's tool results and the hooks to run over them."""

    hooks: list[str]
    results: list[dict[str, Any]]
    tool_uses: list[dict[str, Any]]
    run_id: str = ""
    iteration: int = 0


class ProcessResultsOutput(BaseModel):
    """The results to send, and a reason to end the run if a hook asked for it."""

    results: list[dict[str, Any]]
    stop: str | None = None


class ToolResult(BaseModel):
    """What a tool produced, as the ``content`` and ``is_error`` of its ``tool_result`` block."""

    content: str | list[dict[str, Any]] | dict[str, Any] | None
    """A dict is a placeholder for content stored apart (``agent_runner/contract/transcript.py``)."""

    # Left out of the JSON when false (a result carried through history every iteration), which reads back the same.
    is_error: bool = Field(default=False, exclude_if=lambda is_error: not is_error)

    def block(self, tool_use_id: str) -> dict[str, Any]:
        """The ``tool_result`` block answering the call ``tool_use_id`` with this result (``is_error`` only if so)."""
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": self.content}
        if self.is_error:
            block["is_error"] = True
        return block


class ReconcileOutput(BaseModel):
    """What a tool's ``reconcile`` function said of a call whose outcome was unknown."""

    happened: bool
    """Whether the call took effect; if not, the run may run it again."""

    result: ToolResult | None = None
    """The call's result for Claude, when it happened (or when reconciling itself failed: an ``is_error`` one)."""


class Usage(BaseModel):
    """Token totals over every reply of a run."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def all_input_tokens(self) -> int:
        """Input tokens, cache reads and writes included."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def add(self, usage: dict[str, Any] | None) -> Usage:
        """These totals plus one reply's ``usage``."""
        usage = usage or {}
        return Usage(
            input_tokens=self.input_tokens + int(usage.get("input_tokens") or 0),
            output_tokens=self.output_tokens + int(usage.get("output_tokens") or 0),
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + int(usage.get("cache_creation_input_tokens") or 0),
            cache_read_input_tokens=self.cache_read_input_tokens + int(usage.get("cache_read_input_tokens") or 0),
        )


LAST_STATUS_DETAIL = "agent_runner.last_status"
"""The key of the detail a failed run's failure ends with, ``{LAST_STATUS_DETAIL: status}``: what the ``status``
query answered as it failed, so a reader of its history (``agent-runner status`` without a worker) gives that."""


class RunStatus(BaseModel):
    """A run's state, as the ``status`` query returns it."""

    status: RunStatusName
    iterations: int
    """Iterations as the SDK counts them: replies so far, compactions excluded; ``max_iterations`` counts these."""

    replies: int | None = None
    """Replies so far, compactions included: the numbering of ``replies``, fork points and events (``None`` from a
    worker older than this field)."""

    stop_reason: str | None = None
    """The last reply's stop reason."""

    usage: Usage = Usage()
    transcript_length: int = 0
    """How many messages the transcript holds."""

    version: int | None = 0
    """The transcript's version: it goes up with every change (a reply, tool results, an edit). ``None`` when
    unknown: a run read from its history that ended without recording its status (terminated, cancelled, timed
    out), since the history does not record the edits applied."""

    pending_approvals: list[dict[str, Any]] = []
    """Tool calls waiting for a person (``tool_use_id``, ``name``, ``input``, ``iteration``, ``requested_at``)."""

    refused_edits: list[dict[str, Any]] = Field(default=[], exclude_if=lambda refused: not refused)
    """The last few accepted edits that could not apply when their boundary came (``seq``, ``kind``, ``error``),
    newest last: an edit sent without waiting for it (to a run in step mode, or waiting for a person) learns here that
    it was refused."""

    stop_reason_detail: str | None = None
    """Why a stopped run stopped."""

    cost_usd: float | None = None
    """What the run's usage cost, when the run was given prices (``budget.prices``)."""

    budget_left: str | None = None
    """What is left of each limit the run's budget sets, in words (``15 of 50 output tokens; $0.9991 of $1.0000``),
    as it stands now (a person may have raised it); ``None`` without limits, or from a worker older than this field."""

    last_error: str | None = None
    """The latest failure of a model or tool call still being retried (filled in by the client from Temporal)."""

    tool_results_under_review: list[dict[str, Any]] | None = None
    """In step mode with ``review_results``: the results waiting for a client's ``advance``."""

    replies_head: str | None = None
    """Every reply so far, as a chain in the content store."""

    reply_offset: int = 0
    """Replies the run no longer holds itself (it continued as new): ``replies`` starts after them."""

    continuations: int = 0
    """How many times the run continued as new."""

    sleeping_until: str | None = None
    """While ``sleeping``: when the sleep Claude asked for ends (ISO 8601), unless a ``wake`` or a message ends it
    first."""

    agents: list[dict[str, Any]] = []
    """The child runs its agent calls started, in order: ``{"id", "name", "tool_use_id", "status"}``, the status
    ``running`` until the child ends, then its own (``completed``, ``stopped``, ``max_iterations``, ...) or
    ``failed``, ``cancelled``, ``terminated``, ``timed_out``. Each child is a run: attach to it by its id."""


class HeldTranscript(BaseModel):
    """A conversation by reference, as a run holds it: the messages of ``head`` in the store, then ``pending``."""

    head: str | None = None
    pending: list[dict[str, Any]] = []
    """Messages no model call stored, in the held form (``contract/transcript.py``: placeholders to resolve)."""


class RunResult(BaseModel):
    """What a finished run returns."""

    status: RunStatusName
    iterations: int
    stop_reason: str | None
    final_message: dict[str, Any] | None
    """The last reply; after a ``max_iterations`` cut-off, the unanswered ``tool_use`` reply (as the SDK's
    ``until_done()`` returns it)."""

    usage: Usage = Usage()
    detail: str | None = None
    """Why the run ended, when it did not end on its own: the spent budget, or the reason it was stopped for."""

    transcript: HeldTranscript | None = Field(default=None, exclude_if=lambda transcript: transcript is None)
    """The whole conversation, when it ends with messages no model call stored (so its history does not show
    them): the tool results after a ``max_iterations`` cut-off, a message injected last, the input of a run that
    never called the model. ``None`` (and left out of the JSON) otherwise: then the conversation is the last model
    call's and its reply. Readers without a worker read an ended run's conversation from it
    (``agent_runner/console/ended.py``)."""

    last_status: RunStatus | None = Field(default=None, exclude_if=lambda status: status is None)
    """The run's status as it ended, as the ``status`` query answered then (transcript version, cost, child runs), so
    that readers without a worker report it whole (``agent_runner/console/ended.py``); ``None`` (and left out of the
    JSON) from runs recorded before."""

    @field_serializer("last_status")
    def _short_status(self, status: RunStatus | None) -> dict[str, Any] | None:
        # Its fields at their defaults left out (read back, they are the defaults): the result stays short to read in
        # Temporal's UI and `temporal workflow result`.
        return status.model_dump(mode="json", exclude_defaults=True) if status is not None else None


class ToolUseReady(BaseModel):
    """The ``tool_use_ready`` signal's payload: one complete ``tool_use`` block of the model call under way."""

    model_config = ConfigDict(extra="ignore", strict=True)

    iteration: int
    attempt: int = Field(ge=1)
    token: str = Field(min_length=1)
    """The call's own token (``CreateMessageInput.eager_token``): only that call can start tools early."""
    block: dict[str, Any]
