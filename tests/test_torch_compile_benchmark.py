"""benchmarks/torch_compile.py runs on a CPU (--cpu-check): the model compiled by Inductor (C++ here) once per pass,
checked against eager, its FX graph and generated kernels stored. About 25 s on a 2-core machine (two cold compiles).
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_torch_compile_benchmark_cpu_check(tmp_path):
    out = tmp_path / "torch_compile_cpu.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "torch_compile.py"), "--cpu-check", "--out",
                           str(out)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AISYS_DEVICE": "cpu", "PYTHONPATH": str(ROOT / "src"),
                               "OPENBLAS_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no GPU" in done.stdout
    saved = json.loads(out.read_text())
    assert {row["pass"] for row in saved["rows"]} == {"forward", "forward+backward"}
    assert all(row["correct"] and row["device"] == "cpu" for row in saved["rows"])
    assert "call_function" in saved["fx_graph"] and "gelu" in saved["fx_graph"]
    assert saved["kernels"] and saved["kernels"][0]["language"] == "c++" and saved["kernels"][0]["source"]
