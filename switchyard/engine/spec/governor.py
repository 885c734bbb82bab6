"""Turns draft-model speculation off where it makes decoding slower, from the pace measured while serving.

Whether drafting and verifying k tokens pays depends on the hardware, the models and the text: a draft step
that costs 0.6 of a target step loses on a 2-core CPU (benchmarks/RESULTS.md), where the same pair on a GPU
wins. A fixed batch-size cut-off (`max_batch_size`) catches only the compute-bound end. The governor times
both kinds of pure-decode step at each batch size (emitted tokens, seconds) and picks the faster, probing the
other now and then so that a change (longer contexts, other prompts, lower acceptance) is noticed. Outputs are
the same either way: speculation is lossless. N-gram lookup is not governed (see `SpecDecodeConfig.adaptive`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpeculationGovernor:
    probe_every: int = 64
    """Steps at one batch size between probes of the mode not chosen."""
    probe_steps: int = 4
    """Steps a probe lasts: one step's time is noisy, and the first one after a switch pays a catch-up."""
    smoothing: float = 0.25
    """Weight of a new step in the moving averages of each mode's tokens and seconds."""
    _work: dict[tuple[int, bool], tuple[float, float]] = field(default_factory=dict)
    """(batch size, speculated) -> moving averages of (tokens emitted, seconds) per step. Their ratio weighs
    each step by its time: a slow step (the draft catching up on a new prompt) counts for what it cost, where
    an average of per-step rates would let fast steps drown it."""
    _steps: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.probe_steps < self.probe_every:
            raise ValueError("need 0 <= probe_steps < probe_every")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must lie in (0, 1]")

    def should_speculate(self, batch_size: int) -> bool:
        """Speculate in the next step of `batch_size` decoding sequences?"""
        speculative = self.pace(batch_size, True)
        plain = self.pace(batch_size, False)
        if speculative is None:
            return True
        if plain is None:
            return False
        # The last probe_steps of every probe_every steps try the other mode (not the first ones: those
        # follow the two steps that measured both modes to begin with).
        probing = self._steps.get(batch_size, 0) % self.probe_every >= self.probe_every - self.probe_steps
        return (speculative >= plain) != probing

    def record(self, batch_size: int, speculated: bool, tokens: int, seconds: float) -> None:
        """One pure-decode step: `tokens` emitted in `seconds` by `batch_size` sequences."""
        if tokens <= 0 or seconds <= 0:
            return
        key = (batch_size, speculated)
        previous = self._work.get(key)
        if previous is None:
            self._work[key] = (float(tokens), seconds)
        else:
            w = self.smoothing
            self._work[key] = (
                previous[0] + w * (tokens - previous[0]),
                previous[1] + w * (seconds - previous[1]),
            )
        self._steps[batch_size] = self._steps.get(batch_size, 0) + 1

    def pace(self, batch_size: int, speculated: bool) -> float | None:
        """Measured tokens per second of that mode at that batch size, None before any measurement."""
        work = self._work.get((batch_size, speculated))
        return None if work is None else work[0] / work[1]
