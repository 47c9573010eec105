"""Workflow code: deterministic, no I/O. ``AgentRun`` is the one workflow; the rest is the data it works on."""
