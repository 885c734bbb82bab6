"""`switchyard agent demo` leaves the model to the server it starts: a model that does not resolve is the server's
error, and the demo exits 2 saying the server stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.agents.cli import main


def test_a_model_the_server_cannot_resolve_exits_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-model"
    assert main(["demo", "--model", str(missing), "--device", "cpu"]) == 2
    err = capfd.readouterr().err
    assert f"switchyard agent demo: error: `switchyard serve {missing}` exited with code 2" in err
    assert "no model folder" in err  # the server's own message, above ours
