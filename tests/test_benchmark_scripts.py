"""The kernel benchmark scripts run on a CPU: each kernel once in Triton's interpreter, checked against torch.

They measure nothing here (and say so); these tests keep them working between GPU runs. A kernel that
disagrees with torch makes the script exit non-zero.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args", [("triton_kernels.py", []), ("gemm.py", []),
                                          ("fusion.py", ["--cpu-check", "--out", "fusion_cpu.json"])])
def test_benchmark_script_checks_its_kernels_on_a_cpu(script, args, tmp_path):
    args = [str(tmp_path / a) if a.endswith(".json") else a for a in args] or [str(tmp_path)]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu",
                                                       "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert saved["rows"] and all(row["correct"] for row in saved["rows"])
