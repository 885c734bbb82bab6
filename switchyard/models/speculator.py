"""A speculator: small recurrent heads that guess the next k tokens from the target model's own hidden state.

A separate draft model pays a whole forward pass (every layer's fixed per-op cost, its own KV cache, its own
prompt prefill) per drafted token; on a CPU with a small target that costs most of a target step. The
speculator instead reads the target's final hidden state at the position that produced the last token, and
each of its steps is a handful of vector operations:

    state_0 = h                                   (target's normalised hidden state, [hidden])
    state_{i+1} = norm_i(silu(W_i state_i + E_i[token_i]))
    logits_i = lm_head(state_{i+1})               (distribution of the token after token_i)

token_0 is the token the target just sampled from h, token_i (i > 0) the speculator's own previous guess.
Conditioning each step on the token actually chosen (not only on h, as independent heads do) keeps the guesses
of later steps consistent with earlier ones. No attention and no KV cache: state is one vector per sequence.

Saved as a folder: `config.json` (architecture `SwitchyardSpeculator`) and `model.safetensors`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from switchyard.errors import ModelLoadError

ARCHITECTURE = "SwitchyardSpeculator"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class SpeculatorFormatError(ModelLoadError):
    """A folder that does not hold a speculator, or one that does not fit the target model."""


@dataclass(frozen=True)
class SpeculatorConfig:
    hidden_size: int
    """The target model's hidden size: the state is the target's hidden state."""
    vocab_size: int
    """The target's vocabulary (its LM head's rows)."""
    num_steps: int = 4
    """Tokens one proposal can guess (each step has its own weights)."""
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.vocab_size < 1 or self.num_steps < 1:
            raise SpeculatorFormatError(f"speculator sizes must be positive: {self}")

    @property
    def num_parameters(self) -> int:
        """Per step a state product, a token embedding and a norm (weight and bias); one shared LM head."""
        hidden, vocab = self.hidden_size, self.vocab_size
        return self.num_steps * (hidden * hidden + vocab * hidden + 2 * hidden) + vocab * hidden

    def to_json(self) -> dict[str, object]:
        return {"architectures": [ARCHITECTURE], **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> SpeculatorConfig:
        if ARCHITECTURE not in (data.get("architectures") or []):  # type: ignore[operator]
            raise SpeculatorFormatError(
                f"not a speculator config (architectures: {data.get('architectures')})"
            )
        try:
            return cls(
                hidden_size=int(data["hidden_size"]),  # type: ignore[call-overload]
                vocab_size=int(data["vocab_size"]),  # type: ignore[call-overload]
                num_steps=int(data.get("num_steps", 4)),  # type: ignore[call-overload]
                rms_norm_eps=float(data.get("rms_norm_eps", 1e-5)),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SpeculatorFormatError(f"malformed speculator config: {exc}") from exc


class Speculator(nn.Module):
    def __init__(self, config: SpeculatorConfig) -> None:
        super().__init__()
        self.config = config
        hidden, vocab, steps = config.hidden_size, config.vocab_size, config.num_steps
        self.state_proj = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(steps))
        self.token_embed = nn.ModuleList(nn.Embedding(vocab, hidden) for _ in range(steps))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden, eps=config.rms_norm_eps) for _ in range(steps))
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    @torch.no_grad()
    def init_from_target(self, embed: torch.Tensor, lm_head: torch.Tensor, final_norm: torch.Tensor) -> None:
        """Start the token embeddings, the output head and the norms' scale from the target's: the speculator
        begins training knowing what tokens are, with states on the scale the LM head expects, and learns only
        how to look ahead."""
        for table in self.token_embed:
            table.weight.copy_(embed[: self.config.vocab_size])
        for norm in self.norms:
            norm.weight.copy_(final_norm)
        self.lm_head.weight.copy_(lm_head[: self.config.vocab_size])

    def step(
        self, index: int, state: torch.Tensor, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One look-ahead step: ([..., hidden] state, [...] token ids) -> (next state, logits [..., vocab])."""
        mixed = self.state_proj[index](state) + self.token_embed[index](tokens)
        state = self.norms[index](F.silu(mixed))
        return state, self.lm_head(state)

    def forward(self, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced training pass: hidden [..., H] and the true tokens [..., num_steps] that follow it
        (token 0 is what the target sampled from hidden) -> logits [..., num_steps, vocab]."""
        state = hidden
        logits = []
        for index in range(tokens.shape[-1]):
            state, step_logits = self.step(index, state, tokens[..., index])
            logits.append(step_logits)
        return torch.stack(logits, dim=-2)

    @property
    def dtype(self) -> torch.dtype:
        return self.token_embed[0].weight.dtype

    @property
    def device(self) -> torch.device:
        return self.token_embed[0].weight.device

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, tokens: torch.Tensor, k: int) -> torch.Tensor:
        """[B, H] hidden states and [B] last tokens -> [B, k] greedy guesses."""
        state, current, out = hidden.to(self.dtype), tokens, []
        for index in range(k):
            state, logits = self.step(index, state, current)
            current = logits.argmax(dim=-1)
            out.append(current)
        return torch.stack(out, dim=1)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(self.config.to_json(), indent=2) + "\n")
        save_file(
            {k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(folder / WEIGHTS_FILE)
        )


def is_speculator_folder(folder: str | Path) -> bool:
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        return False
    try:
        return ARCHITECTURE in (json.loads(path.read_text()).get("architectures") or [])
    except (OSError, ValueError, AttributeError):
        return False


def load_speculator(folder: str | Path, dtype: torch.dtype, device: torch.device | str = "cpu") -> Speculator:
    """Load a speculator folder; raises SpeculatorFormatError on a missing or malformed one."""
    folder = Path(folder)
    try:
        data = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise SpeculatorFormatError(f"{folder} has no readable {CONFIG_FILE}: {exc}") from exc
    if not isinstance(data, dict):
        raise SpeculatorFormatError(f"{folder / CONFIG_FILE} is not a JSON object")
    model = Speculator(SpeculatorConfig.from_json(data))
    try:
        weights = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise SpeculatorFormatError(f"{folder} has no readable {WEIGHTS_FILE}: {exc}") from exc
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = sorted(n for n in expected if n in weights and weights[n].shape != expected[n].shape)
    if missing or unexpected or wrong:
        raise SpeculatorFormatError(
            f"{folder} does not match its config: missing {missing[:4]}, unexpected {unexpected[:4]}, "
            f"wrong shapes {wrong[:4]}"
        )
    model.load_state_dict(weights)
    model.requires_grad_(False)
    return model.to(device=device, dtype=dtype).eval()
