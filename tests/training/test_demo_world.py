"""The agent demo's tool world is the one the bundled model was trained on: its frozen noun lists
(`switchyard.agents.demo_nouns`) are the training lists, so every city's weather and every document match."""

from __future__ import annotations

from dataclasses import fields

from switchyard.agents.demo import DemoWorld
from switchyard.agents.demo_nouns import DEMO_NOUNS
from switchyard.agents.demo_world import ToolWorld
from switchyard_training.entities import TRAIN_ENTITIES


def test_the_demo_nouns_are_the_training_lists() -> None:
    for field in fields(DEMO_NOUNS):
        assert getattr(DEMO_NOUNS, field.name) == getattr(TRAIN_ENTITIES, field.name), (
            f"{field.name} drifted from TRAIN_ENTITIES: rewrite switchyard/agents/demo_nouns.py from it"
        )


def test_the_demo_world_is_the_training_world() -> None:
    assert DemoWorld().world == ToolWorld.build(TRAIN_ENTITIES, seed=0)
