"""Online evaluation at the gateway: a sampled share of production requests logged with their answers,
feedback tied to them, judge verdicts over them (docs/evals.md, "Online evaluation")."""
