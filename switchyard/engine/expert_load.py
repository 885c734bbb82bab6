"""The mixture-of-experts router's load: tokens sent to each expert of each sparse layer, for `/metrics`.

The counters live on the model's device and grow inside the forward pass; copying them to the host costs a
device synchronisation, so the engine reads them at most once per `interval` seconds and reports the last
reading in between. Dense models have no counters and report nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from switchyard.models.llama import LlamaForCausalLM


@dataclass
class ExpertLoadMeter:
    """Reads a model's per-expert routed-token counters, throttled."""

    model: LlamaForCausalLM
    interval: float = 1.0
    """Seconds between two reads of the device counters."""
    _last_read: float = float("-inf")
    _totals: dict[tuple[int, int], int] = field(default_factory=dict)

    def totals(self) -> dict[tuple[int, int], int]:
        """{(layer, expert): tokens routed there since load}; empty for a dense model. Between two reads the
        same dict is returned (a snapshot never mutated), so a consumer can skip an unchanged one by identity."""
        moe = self.model.config.moe
        if moe is None or not moe.sparse_layers:
            return {}
        now = time.monotonic()
        if now - self._last_read >= self.interval:
            counts = self.model.routed_tokens()
            if counts is not None:
                self._totals = {
                    (layer, expert): int(count)
                    for layer, row in zip(moe.sparse_layers, counts.tolist(), strict=True)
                    for expert, count in enumerate(row)
                }
            self._last_read = now
        return self._totals
