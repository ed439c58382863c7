"""The prepared GPU check runs end to end on CPU (--dry-run, tiny Llama), so the script cannot rot."""

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path, subprocess_env):
    import sys

    env = dict(subprocess_env, PYTHON=sys.executable)
    command = ["bash", str(REPO / "benchmarks/llm_scale/gpu_check.sh"), "--dry-run", "--profile", "--out",
               str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    methods = {(r["setting"], r["method"]) for r in results["runs"]}
    assert {("single", "hamu"), ("single", "hamu_fused"), ("single", "hamu_f64"), ("single", "graddiff"),
            ("zero3", "hamu"), ("zero3", "graddiff")} <= methods
    single_hamu = next(r for r in results["runs"] if (r["setting"], r["method"]) == ("single", "hamu"))
    ops = [row["op"] for row in single_hamu["profile"]["top"]]  # the profiled step saw the training step's ops
    assert any("addmm" in op or "mm" in op for op in ops), ops
    assert any(r["method"] == "ofmu" for r in results["runs"])
    assert all(r["finite"] and r["steps_timed"] >= 1 for r in results["runs"])
    assert results["evaluator"]["scoring_pairs_per_s"] > 0 and results["evaluator"]["generation_items_per_s"] > 0
    assert results["problems"] == [] and results["single_step_ratio"] > 0
    assert json.loads((tmp_path / "memory_computed.json").read_text())["parameters"] == results["parameters"]
    assert "HAMU/GradDiff step time" in proc.stdout
