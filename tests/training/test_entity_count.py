"""`--entity-count`: how many invented names each training list gets, recorded so a run can be reproduced."""

from __future__ import annotations

from dataclasses import replace

import pytest

from switchyard_training.entities import (
    HELDOUT_ENTITIES,
    TRAIN_ENTITIES,
    TRAINING_NAME_COUNT,
    training_entities,
)
from switchyard_training.model_card import reproduce_command
from switchyard_training.train import build_parser, main
from tests.training.factory import tiny_recipe


def test_default_count_is_the_training_lists_and_more_stay_disjoint_from_held_out() -> None:
    assert training_entities() is TRAIN_ENTITIES
    wider = training_entities(3 * TRAINING_NAME_COUNT)
    assert len(wider.cities) >= len(TRAIN_ENTITIES.cities) + 2 * TRAINING_NAME_COUNT
    assert len(wider.first_names) >= len(TRAIN_ENTITIES.first_names) + 2 * TRAINING_NAME_COUNT
    for field in ("first_names", "last_names", "cities", "products", "companies"):
        assert not set(getattr(wider, field)) & set(getattr(HELDOUT_ENTITIES, field)), field
    with pytest.raises(ValueError, match="must be >= 1"):
        training_entities(0)


def test_entity_count_option_reproduces_and_rejects_nonpositive() -> None:
    assert "--entity-count" not in reproduce_command(tiny_recipe(), 0, 90)
    command = reproduce_command(replace(tiny_recipe(), entity_count=3000), 0, 90)
    assert "--entity-count 3000" in command
    assert build_parser().parse_args(command.split()[2:]).entity_count == 3000
    with pytest.raises(SystemExit):
        main(["--entity-count", "0"])
