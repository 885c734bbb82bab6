"""Agent runtime: tools, runner, guardrails, memory and retrieval."""
