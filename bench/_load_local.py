"""``bench/load.py``'s ``ping`` as a local tool (``tool_options(local=True)``), for its ``agent-runner-local`` mode."""

from anthropic import beta_async_tool

from agent_runner import tool_options


@tool_options(local=True)
@beta_async_tool(name="ping")
async def ping(n: int) -> str:
    """Answer a ping at once.

    Args:
        n: A sequence number.
    """
    return f"pong {n}"
