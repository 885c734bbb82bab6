"""The platform stays torch-free, and a missing extra is named by the command that needs it (fresh
interpreters: this test process may have imported torch long ago)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_control_plane_loads_no_torch_and_no_engine() -> None:
    code = """
import sys
import switchyard.platform.cli, switchyard.platform.cluster_server, switchyard.platform.api
import switchyard.platform.control_plane, switchyard.platform.autoscaler, switchyard.platform.ray_executor
assert "torch" not in sys.modules, "the platform loaded torch"
loaded = sorted(m for m in sys.modules if m.startswith(("switchyard.engine", "switchyard.models", "switchyard.server")))
assert not loaded, f"the platform loaded {loaded}"
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_cluster_commands_without_ray_or_httpx_name_the_platform_extra(tmp_path: Path) -> None:
    block = "import sys; sys.modules[sys.argv[1]] = None  # as if not installed\n"
    start = (
        block + "from switchyard.cli import main; sys.exit(main(['cluster', 'start', '--db', sys.argv[2]]))"
    )
    result = run_python(start, "ray", str(tmp_path / "jobs.db"))
    assert result.returncode == 2, result.stderr
    assert "ray is not installed" in result.stderr and "pip install 'switchyard[platform]'" in result.stderr
    assert "Traceback" not in result.stderr
    nodes = block + "from switchyard.cli import main; sys.exit(main(['cluster', 'nodes']))"
    result = run_python(nodes, "httpx")
    assert result.returncode == 2 and "pip install 'switchyard[platform]'" in result.stderr, result.stderr
