"""The durable contract: names, input and output types, live events, errors and the held-content format.

Everything else imports this layer; it imports nothing of ours. A name or shape here is recorded in workflow
histories, so changing one is a versioning decision (``workflow.patched``), never a refactor.
"""
