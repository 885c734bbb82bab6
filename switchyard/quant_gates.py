"""Where `switchyard eval quant` records a quantized model's verdict, so the server can warn at start when a
quantized model has none (it serves it either way: the gate informs, it does not block).

A verdict is keyed by the model folder and the quantization method: `$SWITCHYARD_HOME/quant-gates/KEY.json`.
Torch-free and HTTP-free, so both the evals (which write) and the engine builder (which reads) may import it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from switchyard.home import switchyard_home


def gate_path(model_folder: str | Path, method: str) -> Path:
    resolved = str(Path(model_folder).expanduser().resolve())
    key = hashlib.sha256(f"{resolved}\0{method}".encode()).hexdigest()[:20]
    return switchyard_home() / "quant-gates" / f"{key}.json"


def record_gate(model_folder: str | Path, method: str, verdict: dict[str, Any]) -> Path:
    path = gate_path(model_folder, method)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(
        json.dumps({"model": str(model_folder), "method": method, **verdict}, indent=2) + "\n"
    )
    temporary.replace(path)
    return path


def read_gate(model_folder: str | Path, method: str) -> dict[str, Any] | None:
    """The recorded verdict, or None when `switchyard eval quant` never ran for this model and method."""
    try:
        return json.loads(gate_path(model_folder, method).read_text())
    except (OSError, json.JSONDecodeError):
        return None
