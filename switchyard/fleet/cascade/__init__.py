"""Model cascades: a small model answers first, a larger one only when the small one is unsure (config.py,
decision.py, answer.py, runner.py)."""
