"""Tiny shapes and a tiny train-default recipe, so pipeline tests run in seconds."""

from __future__ import annotations

from switchyard.bundled.train import DefaultRecipe, ModelShape, TrainConfig

TINY_SHAPE = ModelShape(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def tiny_recipe(main_steps: int = 5, draft_steps: int = 2) -> DefaultRecipe:
    return DefaultRecipe(
        corpus_size=150,
        vocab_size=800,
        row_len=768,
        main_shape=TINY_SHAPE,
        draft_shape=ModelShape(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        ),
        main=TrainConfig(max_steps=main_steps, batch_rows=2, warmup_steps=2, checkpoint_every=2),
        draft=TrainConfig(max_steps=draft_steps, batch_rows=2, warmup_steps=1),
    )
