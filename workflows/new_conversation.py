"""A new run's conversation, set up from its input: its tools' definitions, its messages, or a sent run's history.

This module is imported by workflow code, so it holds no I/O (the MCP servers' tools are listed by an activity).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_runner.contract.conversation import Conversation
    from agent_runner.contract.run_input import RunSpec
    from agent_runner.workflows.continuation import continued_conversation
    from agent_runner.workflows.mcp import pin_mcp_tools
    from agent_runner.workflows.plain_json import as_held
    from agent_runner.workflows.state import RunState


async def start_conversation(state: RunState, spec: RunSpec) -> None:
    """Set up ``state.conversation`` for a run whose tools ``state.tools`` holds (the workers described them)."""
    # A send's tools as its input named them (one the ended run removed stands for its name, for the MCP tools).
    definitions = [
        t if isinstance(t, dict) else state.tools[t].definition if t in state.tools else {"name": t} for t in spec.tools
    ]
    messages = as_held(spec.messages, spec.held)
    if spec.mcp:  # the tools of the MCP servers the run names, listed once: the run's list for good
        mcp_tools = await pin_mcp_tools(spec.mcp, [str(d.get("name")) for d in definitions])
        state.tools.update({tool.name: tool for tool in mcp_tools})
        definitions += [tool.definition for tool in mcp_tools]
    state.conversation = Conversation.start(spec.params, definitions, messages, threading=spec.thread)
    if spec.continue_from is not None:  # Run.send: the conversation of an ended run goes on
        state.conversation = continued_conversation(spec.continue_from, messages)
        state.usage = spec.continue_from.usage
        state.fallback_index = spec.continue_from.fallback_index
