"""A replica's load from its Prometheus /metrics: waiting and running requests and KV cache usage.

Switchyard's names come first; vLLM's and SGLang's are read the same way, so the fleet balances across those
servers too. Samples are summed over their labels (a server serving several model names reports each).
"""

from __future__ import annotations

from switchyard.fleet.replica import ReplicaLoad

WAITING_NAMES = ("switchyard:num_requests_waiting", "vllm:num_requests_waiting", "sglang:num_queue_reqs")
RUNNING_NAMES = ("switchyard:num_requests_running", "vllm:num_requests_running", "sglang:num_running_reqs")
KV_USAGE_NAMES = (
    "switchyard:kv_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
)
_WANTED = frozenset((*WAITING_NAMES, *RUNNING_NAMES, *KV_USAGE_NAMES))


def parse_replica_load(text: str, scraped_at: float) -> ReplicaLoad | None:
    """The load in a /metrics page, or None when it has none of the known names (not an inference server's)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        if not rest:  # no labels: `name value`
            name, _, value_text = line.partition(" ")
        else:
            value_text = rest.rpartition("}")[2]
        if name not in _WANTED:
            continue
        try:
            value = float(value_text.split()[0])
        except (IndexError, ValueError):
            continue
        totals[name] = totals.get(name, 0.0) + value
    if not totals:
        return None
    return ReplicaLoad(
        num_waiting=int(_first(totals, WAITING_NAMES)),
        num_running=int(_first(totals, RUNNING_NAMES)),
        kv_cache_usage=min(1.0, _first(totals, KV_USAGE_NAMES)),
        scraped_at=scraped_at,
    )


def _first(totals: dict[str, float], names: tuple[str, ...]) -> float:
    return next((totals[name] for name in names if name in totals), 0.0)
