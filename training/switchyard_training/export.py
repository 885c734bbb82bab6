"""A trained model written out as a Hugging Face folder, atomically."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Tokenizer

from switchyard_training.chat_format import ENDOFTEXT, IM_END
from switchyard_training.tokenizer_training import save_tokenizer


def write_model_folder(
    model: Any, tokenizer: Tokenizer, folder: Path, card: str, model_max_length: int
) -> Path:
    """Save an HF folder (bf16 safetensors, configs, tokenizer, README) atomically: built fully or not at all."""
    folder = Path(folder)
    staging = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    export = model.to(torch.bfloat16)
    export.config.dtype = torch.bfloat16
    export.generation_config = transformers.GenerationConfig(
        eos_token_id=[tokenizer.token_to_id(IM_END), tokenizer.token_to_id(ENDOFTEXT)],
        pad_token_id=tokenizer.token_to_id(ENDOFTEXT),
        do_sample=False,
    )
    export.save_pretrained(staging, safe_serialization=True)
    save_tokenizer(tokenizer, staging, model_max_length=model_max_length)
    (staging / "README.md").write_text(card)
    if folder.exists():
        shutil.rmtree(folder)
    for path in staging.iterdir():
        path.chmod(0o644)  # safetensors writes 0600; the folder ships inside an installed package
    os.replace(staging, folder)
    return folder
