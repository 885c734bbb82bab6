"""Speculative decoding: `decoder` (config, proposals, batched lossless verification), one file per proposer
(`ngram`, `draft`, `speculator`), `governor` (speculate only where it pays) and `step` (the engine's propose /
keep / verify phases, returning what to apply)."""
