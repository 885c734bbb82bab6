#!/usr/bin/env bash
# The prepared GPU check (issue 52): the gpu-marked tests, then the GPU benchmarks, results in one folder.
#
#   benchmarks/gpu_check.sh [RESULTS_DIR]      default: benchmarks/results/gpu/<UTC time>
#
# Sized for about 8 minutes on one H200: tests up to 4 minutes, benchmarks up to 5.5 (random Llama-3-8B and
# Qwen2.5-0.5B shapes written to a scratch folder, ~17 GB). Expects Python with torch (CUDA), Triton >= 3.6 and
# transformers. Other wheels it needs (WHEELS below) are installed from ./wheels when present and missing:
# fetch them beforehand, where a registry is reachable, with
#   pip download -d wheels pytest pytest-timeout jsonschema psutil regex xgrammar nvidia-ml-py
# Switchyard itself runs from this checkout (PYTHONPATH), not installed: its torch pin does not apply.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/gpu/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/training${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python}"

WHEELS=(pytest pytest-timeout jsonschema psutil regex xgrammar nvidia-ml-py)
missing=$("$PYTHON" - <<'PY'
import importlib.util
modules = {"pytest": "pytest", "pytest-timeout": "pytest_timeout", "jsonschema": "jsonschema",
           "psutil": "psutil", "regex": "regex", "xgrammar": "xgrammar", "nvidia-ml-py": "pynvml"}
print(" ".join(p for p, m in modules.items() if importlib.util.find_spec(m) is None))
PY
)
if [[ -n "$missing" ]]; then
  if [[ -d wheels ]]; then
    echo "installing from ./wheels: $missing"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install --no-index --find-links wheels $missing
  else
    echo "missing packages ($missing) and no ./wheels folder; needed: ${WHEELS[*]}" >&2
  fi
fi

{ nvidia-smi; "$PYTHON" -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"; } \
  > "$OUT/environment.txt" 2>&1

echo "== gpu-marked tests"
timeout 240 "$PYTHON" -m pytest -o addopts="" -m gpu -q -p no:cacheprovider -rs \
  tests/models/test_triton_attention_cuda.py tests/models/test_reference_kernel.py tests/engine/test_cuda_engine.py \
  tests/platform/test_nvml_health.py \
  --junitxml "$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.log"
tests_status=${PIPESTATUS[0]}

echo "== GPU benchmarks"
models=$(mktemp -d)
timeout 330 "$PYTHON" benchmarks/gpu_bench.py --out "$OUT" --workdir "$models" 2>&1 | tee "$OUT/gpu-bench.log"
bench_status=${PIPESTATUS[0]}
rm -rf "$models"

echo "tests exit $tests_status, benchmarks exit $bench_status; results in $OUT"
[[ $tests_status -eq 0 && $bench_status -eq 0 ]]
