"""The entity mixes `training/probes/entity_gap.py` grades a model on hold out exactly what their names say."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from switchyard_training.entities import HELDOUT_ENTITIES, TRAIN_ENTITIES, training_entities


def _entity_gap() -> Any:
    path = Path(__file__).resolve().parents[2] / "training" / "probes" / "entity_gap.py"
    spec = importlib.util.spec_from_file_location("entity_gap", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_variants_hold_out_what_they_name() -> None:
    variants = _entity_gap().entity_variants(seed=0)
    held, train = HELDOUT_ENTITIES, TRAIN_ENTITIES
    held_stems = {c.rpartition(" ")[0] for c in held.companies}
    held_suffixes = {c.rpartition(" ")[2] for c in held.companies}
    train_stems = {c.rpartition(" ")[0] for c in train.companies}
    train_suffixes = {c.rpartition(" ")[2] for c in train.companies}
    assert all(len(v.companies) == len(held.companies) for v in variants.values())
    assert variants["held out (the gate)"] is held
    names = variants["training names"]
    assert set(names.companies) <= set(train.companies) and names.cities == train.cities
    mixed = variants["training companies, rest held out"]
    assert set(mixed.companies) <= set(train.companies) and mixed.cities == held.cities
    mixed = variants["held-out companies, rest training"]
    assert mixed.companies == held.companies and mixed.products == train.products
    for name, stems, suffixes in (
        ("held-out stems, training suffixes", held_stems, train_suffixes),
        ("training stems, held-out suffixes", train_stems, held_suffixes),
    ):
        parts = [c.rpartition(" ") for c in variants[name].companies]
        assert all(stem in stems and suffix in suffixes for stem, _, suffix in parts), name
        assert variants[name].cities == held.cities


def test_a_runs_entity_count_sets_its_training_names() -> None:
    wide = training_entities(600)
    names = _entity_gap().entity_variants(seed=0, entity_count=600)["training names"]
    assert names.cities == wide.cities and set(names.companies) <= set(wide.companies)
    assert names.cities != TRAIN_ENTITIES.cities
