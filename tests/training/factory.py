"""Tiny shapes and a tiny train-default recipe (wired circuit included), so pipeline tests run in seconds."""

from __future__ import annotations

from switchyard_training.recipe import DefaultRecipe, ModelShape, TrainConfig

TINY_SHAPE = ModelShape(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)

WIRED_TINY_SHAPE = ModelShape(
    hidden_size=192,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=3,
    num_key_value_heads=1,
    rope_theta=5e5,
)
"""The smallest shape the wired copy circuit fits (head_dim 64, hidden > 2 x head_dim, 2 layers)."""


def tiny_recipe(main_steps: int = 5, draft_steps: int = 2) -> DefaultRecipe:
    return DefaultRecipe(
        corpus_size=150,
        vocab_size=800,
        row_len=768,
        main_shape=WIRED_TINY_SHAPE,
        draft_shape=WIRED_TINY_SHAPE,
        main=TrainConfig(max_steps=main_steps, batch_rows=2, warmup_steps=2, checkpoint_every=2),
        draft=TrainConfig(max_steps=draft_steps, batch_rows=2, warmup_steps=1),
        main_locator_layers=(),  # the tiny shape has one kv head, the wired one
    )
