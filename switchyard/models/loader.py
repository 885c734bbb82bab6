"""Loads a Hugging Face model folder (config.json + safetensors) into a LlamaForCausalLM (dense or MoE).

Weights are read through safetensors' memory map, converted to the requested dtype and placed on the requested
device one tensor at a time, so peak memory stays near the size of the converted model; a tensor-parallel rank
reads only its slices of unquantized tensors (and cuts quantized ones as each is decoded), so its peak stays near
its shard. Quantized checkpoints are read dequantized; an int4 projection keeps its checkpoint grid on the layer
(`CHECKPOINT_GRID`; a mixture's experts, one grid each on their block, `CHECKPOINT_EXPERT_GRIDS`) so the int4
layers are rebuilt from the stored codes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open

from switchyard.errors import ModelLoadError
from switchyard.models.config import ModelArchConfig
from switchyard.models.llama import LlamaForCausalLM, ShardIndex
from switchyard.models.moe import SparseMoeBlock
from switchyard.models.quantization.checkpoint import checkpoint_scheme, log_dequantized, read_weight
from switchyard.models.quantization.int4_formats import CHECKPOINT_EXPERT_GRIDS, CHECKPOINT_GRID, Int4Grid
from switchyard.models.rope import RotaryEmbedding

if TYPE_CHECKING:
    from switchyard.models.tensor_parallel import RankCut

FLOAT_STORAGE = frozenset({"F64", "F32", "F16", "BF16"})
"""safetensors dtypes a tensor-parallel rank may read as a slice (others go through `read_weight`)."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}; use float32, bfloat16 or float16")
        return dtype
    try:
        return DTYPES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {', '.join(DTYPES)}") from None


def weight_files(folder: Path) -> dict[str, Path]:
    """Map every tensor name to the safetensors file holding it (single file or sharded with index)."""
    index_path = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            raise ModelLoadError(f"malformed index: {exc}", str(index_path)) from None
        return {name: folder / file for name, file in weight_map.items()}
    files = [single] if single.is_file() else sorted(folder.glob("*.safetensors"))
    if not files:
        found = [p.name for p in folder.glob("*.bin")]
        hint = f" (found {', '.join(found)}: convert it to safetensors)" if found else ""
        raise ModelLoadError(f"no model.safetensors or sharded safetensors with index{hint}", str(folder))
    mapping: dict[str, Path] = {}
    for path in files:
        for name in _open(path).keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            mapping[name] = path
    return mapping


def _open(path: Path):  # type: ignore[no-untyped-def]
    if not path.is_file():
        raise ModelLoadError("weight file listed in the index is missing", str(path))
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(
            f"cannot read safetensors file (truncated or corrupt?): {exc}", str(path)
        ) from None


def load_model(
    folder: str | Path,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    max_positions: int | None = None,
    config: ModelArchConfig | None = None,
    cut: RankCut | None = None,
) -> LlamaForCausalLM:
    """Build the model described by `folder/config.json` (or by `config`, read from it and adjusted, e.g.
    `with_long_context`) and fill it from the folder's safetensors.

    With `cut`, only one tensor-parallel rank's part of each tensor is kept (`tensor_parallel.RankCut`): the
    model has the rank's shapes, and unquantized tensors are read as slices, never whole."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelLoadError("model folder not found", str(folder))
    config = config or ModelArchConfig.from_folder(folder)
    scheme = checkpoint_scheme(folder)  # refuses a scheme it cannot load, rather than dropping its scales
    torch_dtype = parse_dtype(dtype)
    device = torch.device(device)
    with torch.device("meta"):
        whole = LlamaForCausalLM(config, max_positions)
        model = whole if cut is None else LlamaForCausalLM(cut.local, max_positions)
    model.rotary = RotaryEmbedding(
        config.rope,
        config.head_dim,
        max_positions or config.max_position_embeddings,
        config.max_position_embeddings,
    ).to(device)

    locations = weight_files(folder)
    handles: dict[Path, object] = {}
    shards: dict[str, dict[ShardIndex, torch.Tensor]] = defaultdict(dict)
    grids: dict[str, dict[ShardIndex, Int4Grid | None]] = defaultdict(dict)
    params = dict(whole.named_parameters())

    def handle_of(name: str):  # type: ignore[no-untyped-def]
        path = locations.get(name)
        if path is None:
            raise KeyError(name)
        return handles.get(path) or handles.setdefault(path, _open(path))

    def read(name: str) -> torch.Tensor:
        return handle_of(name).get_tensor(name)  # type: ignore[no-any-return]

    for ckpt_name, param_name, shard in whole.checkpoint_names():
        path = locations.get(ckpt_name, folder)  # a packed projection has no tensor of this name
        expected = _expected_shape(params[param_name].shape, param_name, shard, config)
        part = cut.part(param_name, shard) if cut is not None and scheme is None else None
        grid = None
        try:
            view = handle_of(ckpt_name).get_slice(ckpt_name) if part is not None else None
            if view is not None and view.get_dtype() in FLOAT_STORAGE:  # only the rank's slice is read
                assert part is not None
                shape = tuple(view.get_shape())
                axis, start, end = part
                if shape == expected:
                    tensor = view[start:end] if axis == 0 else view[:, start:end]
            else:
                part = None  # read whole (and refused there if it is not a float tensor), then cut
                decoded = read_weight(scheme, ckpt_name, read, locations.__contains__)
                tensor, grid, shape = decoded.weight, decoded.grid, tuple(decoded.weight.shape)
        except KeyError as exc:
            raise ModelLoadError(f"tensor {exc} is missing from the checkpoint", str(folder)) from None
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"cannot read tensor {ckpt_name!r}: {exc}", str(path)) from None
        if shape != expected:
            raise ModelLoadError(
                f"tensor {ckpt_name!r} has shape {shape}, config.json implies {expected}", str(path)
            )
        if cut is not None and part is None:
            tensor, grid = cut.tensor(param_name, shard, tensor), cut.grid(param_name, shard, grid)
        grids[param_name][shard] = grid
        shards[param_name][shard] = tensor.to(device=device, dtype=torch_dtype)

    for param_name, parts in shards.items():
        value = _assemble(parts)
        _set_parameter(model, param_name, torch.nn.Parameter(value, requires_grad=False))
        module_name, _, attr = param_name.rpartition(".")
        if any(isinstance(key, tuple) for key in parts):  # stacked experts: one grid per expert, or none
            expert_grids = _assemble_expert_grids(grids[param_name])
            if expert_grids is not None:
                module = model.get_submodule(module_name)
                stacks = getattr(module, CHECKPOINT_EXPERT_GRIDS, None) or {}
                setattr(module, CHECKPOINT_EXPERT_GRIDS, {**stacks, attr: expert_grids})
        else:
            grid = _concat_grids([grids[param_name][key] for key in _shard_order(parts)])
            if grid is not None:
                setattr(model.get_submodule(module_name), CHECKPOINT_GRID, grid)
    if scheme is not None:
        log_dequantized(scheme, torch_dtype, device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    elif "lm_head.weight" not in shards:
        raise ModelLoadError("lm_head.weight is missing and embeddings are not tied", str(folder))
    _check_no_meta(model, folder)
    for module in model.modules():
        if isinstance(module, SparseMoeBlock):
            module.reset_routed_tokens(device)
    return model.eval()


def _assemble(parts: dict[ShardIndex, torch.Tensor]) -> torch.Tensor:
    """One parameter from its checkpoint tensors: as is, concatenated (fused q/k/v, gate/up), or concatenated
    per expert and stacked ([experts, out, in])."""
    if None in parts:
        return parts[None]
    keys = sorted(parts, key=lambda k: k if isinstance(k, tuple) else (k,))  # type: ignore[arg-type, return-value]
    if isinstance(keys[0], tuple):
        experts = sorted({key[0] for key in keys})  # type: ignore[index]
        return torch.stack(
            [torch.cat([parts[key] for key in keys if key[0] == e], dim=0) for e in experts]  # type: ignore[index]
        )
    return torch.cat([parts[key] for key in keys], dim=0)


def _shard_order(parts: dict[ShardIndex, object]) -> list[ShardIndex]:
    """The keys of a fused parameter's parts (None, or 0, 1, 2) in the order `_assemble` concatenates them."""
    return sorted(parts, key=lambda k: -1 if k is None else k)  # type: ignore[arg-type, return-value, operator]


def _assemble_expert_grids(parts: dict[ShardIndex, Int4Grid | None]) -> list[Int4Grid] | None:
    """A stacked expert parameter's grids, one per expert (its parts' rows concatenated as `_assemble` does),
    or None when any expert has none: the stack is then kept in dtype as a whole."""
    experts = sorted({key[0] for key in parts if isinstance(key, tuple)})
    found = []
    for expert in experts:
        keys = sorted(key[1] for key in parts if isinstance(key, tuple) and key[0] == expert)
        grid = _concat_grids([parts[(expert, part)] for part in keys])
        if grid is None:
            return None
        found.append(grid)
    return found


def _concat_grids(found: list[Int4Grid | None]) -> Int4Grid | None:
    """One layer's grid from its checkpoint tensors' grids, rows in order, or None when any part has none or
    the parts' groups differ."""
    if not found or any(grid is None for grid in found):
        return None
    sizes = {grid.group_size for grid in found if grid is not None}
    if len(sizes) != 1:
        return None
    return Int4Grid(
        torch.cat([grid.scales for grid in found if grid is not None]),
        torch.cat([grid.zeros for grid in found if grid is not None]),
        sizes.pop(),
    )


def _expected_shape(
    fused: torch.Size, name: str, shard: ShardIndex, config: ModelArchConfig
) -> tuple[int, ...]:
    if shard is None:
        return tuple(fused)
    if isinstance(shard, tuple):  # one expert's slice of a stacked [experts, out, in] parameter
        rows = fused[1] // 2 if name.endswith(".experts_gate_up") else fused[1]
        return (rows, fused[2])
    if ".qkv_proj." in name:
        return ((config.q_size, config.kv_size, config.kv_size)[shard], *fused[1:])
    return (fused[0] // 2, *fused[1:])  # the gate or up half of gate_up_proj (dense MLP or shared expert)


def _set_parameter(model: torch.nn.Module, name: str, value: torch.nn.Parameter) -> None:
    module_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(module_name), attr, value)


def _check_no_meta(model: torch.nn.Module, folder: Path) -> None:
    for name, param in model.named_parameters():
        if param.is_meta:
            raise ModelLoadError(f"parameter {name!r} was not loaded", str(folder))
