"""Generators of one conversation per corpus category, with the grader's expectations recorded alongside.

Each generator takes a `TaskContext` (a seeded RNG, the entity lists and the offline tool world) and returns an
`Example`. Lexical variety comes from three places: paraphrase lists for every request and answer, the entity
lists (disjoint between training and held-out corpora), and surface noise on user text (casing, punctuation,
politeness). Arguments in tool calls copy the user's words (a city as typed), so the model learns to copy
rather than to normalise spellings it has never seen; units are the exception, mapped to the schema's enum.

One module per family: `chat` (greetings, the fact table, "I don't know"), `tool_requests` and `tool_use`
(one call, two calls, no fitting tool), `extraction`, `grounded`, `injection`, `copy_drill`; `generators` maps
each corpus category to its generator. `context` holds what they share (`TaskContext`, `Conversation`) and
`surface` the noise on user text.
"""
