"""The one KV budget formula: its dtype table agrees with torch, and on an accelerator it charges whatever is in
use against the device's fraction (the CPU case is checked against the engine in tests/plan)."""

from __future__ import annotations

import pytest
import torch

from switchyard import kv_budget
from switchyard.config import EngineConfig
from switchyard.models.config import ModelArchConfig
from switchyard.models.kv_cache_dtype import KV_CACHE_DTYPES
from switchyard.plan.capacity import PlanInputs, make_plan
from switchyard.plan.devices import parse_device
from switchyard.plan.shapes import NAMED_SHAPES

GiB = 1 << 30


def test_element_bytes_are_torch_element_sizes() -> None:
    """The engine's --kv-cache-dtype names, which include every --dtype name but auto."""
    named = {name: dtype for name, dtype in KV_CACHE_DTYPES.items() if dtype is not None}
    assert set(kv_budget.ELEMENT_BYTES) == set(named)
    for name, dtype in named.items():
        assert kv_budget.element_bytes(name) == torch.empty((), dtype=dtype).element_size(), name
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        kv_budget.element_bytes("int3")


def test_the_planner_defaults_are_the_engines() -> None:
    """Kept apart so the planner loads no torch; kept equal here."""
    assert PlanInputs.max_num_seqs == EngineConfig.max_num_seqs
    assert PlanInputs.memory_utilization == kv_budget.default_memory_utilization(on_accelerator=True)


def test_on_an_accelerator_the_fraction_covers_everything_in_use() -> None:
    total, in_use, activation = 80 * GiB, 20 * GiB, GiB
    budget = kv_budget.kv_budget_bytes(
        available_bytes=total - in_use, activation_bytes=activation, utilization=0.9, device_total_bytes=total
    )
    assert budget == int(total * 0.9) - in_use - activation
    cpu = kv_budget.kv_budget_bytes(
        available_bytes=total - in_use, activation_bytes=activation, utilization=0.5, device_total_bytes=None
    )
    assert cpu == (total - in_use) // 2 - activation


def test_a_gpu_plan_is_the_formula_by_hand() -> None:
    config = ModelArchConfig.from_dict(NAMED_SHAPES["llama-3-8b"])
    plan = make_plan(PlanInputs(config, "x", parse_device("80GiB"), max_model_len=8192))
    weights, activation = plan.weights_bytes_per_device, plan.activation_bytes
    assert plan.usable_bytes == int(80 * GiB * 0.9)
    assert plan.kv_budget_bytes == int(80 * GiB * 0.9) - weights - activation
    assert plan.num_blocks == plan.kv_budget_bytes // (131_072 * 16)
    assert kv_budget.kv_blocks(-1, 131_072, 16) == 0 and kv_budget.blocks_for(17, 16) == 2
