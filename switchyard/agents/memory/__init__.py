"""An agent's memory: `session` (conversation history in SQLite), `context_budget` (fit history into the
context window, summarising what falls out) and `vector` (long-term facts recalled by similarity)."""
