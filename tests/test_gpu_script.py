"""benchmarks/gpu.sh, the GPU run, checked without a GPU: its dry run does every step on NumPy
at toy sizes and writes every file it promises; a failing step makes the script fail; and
`--device gpu` without CuPy is a clear error, not a silent NumPy run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minieagle.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu.sh"


def _run(out: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip


def test_the_dry_run_writes_every_result_file(tmp_path):
    done = _run(tmp_path / "out", PYTHON=sys.executable)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    expected = {
        "gpu-machine.txt", "gpu-tests.log", "gpu-cost.json", "gpu-host-cost.json",
        "gpu-bench-methods.json", "gpu-head-train.json", "gpu-run.log",
    }  # fmt: skip
    assert expected <= {p.name for p in out.iterdir()}
    cost = json.loads((out / "gpu-cost.json").read_text())
    assert cost["device"] == "cpu"  # the dry run's lane
    assert set(cost["verify"]["relative_to_one"]) == {"1", "2", "4", "8", "16", "32", "64"}
    methods = json.loads((out / "gpu-bench-methods.json").read_text())
    assert {"vanilla", "eagle2", "eagle3"} <= set(methods["T=0"]["all"])
    assert methods["T=0"]["all"]["eagle2"]["differs_from_vanilla"] == 0.0
    training = json.loads((out / "gpu-head-train.json").read_text())
    assert training["device"] == "cpu"
    for head in ("eagle1", "eagle3"):  # both heads trained: loss + backward + clip + AdamW
        assert training["heads"][head]["after"]["step_s"]["median"] > 0
        assert training["heads"][head]["flops_per_step"] > 0
    assert "=== done: exit 0" in (out / "gpu-run.log").read_text()


def test_a_failing_step_fails_the_script(tmp_path):
    done = _run(tmp_path / "out", PYTHON="false")  # every Python step exits 1
    assert done.returncode == 1
    assert "=== done: exit 1" in (tmp_path / "out" / "gpu-run.log").read_text()


def test_device_gpu_without_cupy_is_a_clear_error(capsys):
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here")
    assert main(["generate", "--device", "gpu", "--max-new-tokens", "2", "hello"]) != 0
    err = capsys.readouterr().err
    assert "device='gpu' needs CuPy" in err and "--device cpu" in err


def test_the_model_suite_has_no_gpu_lane(capsys):
    assert main(["bench", "--suite", "model", "--device", "gpu"]) != 0
    assert "--suite methods" in capsys.readouterr().err
