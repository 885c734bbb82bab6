"""Evaluation harness: suites of cases (chat requests, agent tasks, RAG questions) run against any
OpenAI-compatible endpoint, scored by named scorers, summarised with confidence intervals, compared with paired
significance tests, and reported as HTML and Markdown (`switchyard eval`, docs/evals.md).

Like `switchyard.agents` and `switchyard.bench`, this package is a client of the API: it never imports the
engine or the models, and loads no torch. Its scorers are plain functions over a case's outcome, so the
training package's quality gate scores with the same code.
"""
