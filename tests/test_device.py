"""The device switch and `aisys doctor`."""

import os
import subprocess
import sys

import pytest

from aisys import device


def test_auto_uses_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.delenv("AISYS_DEVICE", raising=False)
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    assert device.current() == "cpu"
    assert device.describe() == "cpu (AISYS_DEVICE=auto, no CUDA GPU found)"


def test_auto_uses_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.delenv("AISYS_DEVICE", raising=False)
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    assert device.current() == "cuda"


def test_cpu_overrides_a_gpu(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "CPU")
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    assert device.current() == "cpu"
    assert device.describe() == "cpu (AISYS_DEVICE=cpu, requested)"


def test_gpu_count_is_torchs_unless_the_cpu_is_asked_for(monkeypatch):
    import torch

    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("AISYS_DEVICE", raising=False)
    assert device.gpu_count() == 4
    monkeypatch.setenv("AISYS_DEVICE", "CPU")
    assert device.gpu_count() == 0
    monkeypatch.setenv("AISYS_DEVICE", "auto")
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    assert device.gpu_count() == 0


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "cuda")
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match="AISYS_DEVICE=cuda, but torch sees no CUDA GPU"):
        device.current()


def test_unknown_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "tpu")
    with pytest.raises(ValueError, match="environment variable AISYS_DEVICE must be one of 'auto', 'cpu', 'cuda'"):
        device.current()


def test_cpu_runs_triton_in_its_interpreter(monkeypatch):
    monkeypatch.setenv("AISYS_DEVICE", "cpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert device.use_triton_interpreter()
    assert os.environ["TRITON_INTERPRET"] == "1"


def doctor(**env):
    return subprocess.run([sys.executable, "-m", "aisys", "doctor"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_doctor_reports_the_machine_and_the_tracks():
    done = doctor(AISYS_DEVICE="cpu")
    assert done.returncode == 0, done.stderr
    for item in ("CPU", "GPU", "torch", "Triton", "numba", "CuPy", "bubblewrap", "Exercise tracks:",
                 "reference code and CPU exercises", "cpu (AISYS_DEVICE=cpu, requested)"):
        assert item in done.stdout
    assert "interpreter" in done.stdout


def test_doctor_explains_a_bad_setting_without_a_traceback():
    done = doctor(AISYS_DEVICE="gpu")
    assert done.returncode == 2
    assert "aisys: error: environment variable AISYS_DEVICE must be one of" in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_asks_the_grader_in_a_process_of_its_own():
    """aisys never imports the grader: the sandbox probe is `aisys-grader sandbox`, run as a command."""
    code = ("import sys; from aisys import doctor; found = doctor._bubblewrap(); "
            "print(found.item, [m for m in sys.modules if m.startswith('aisys_grader')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bubblewrap []"
    probe = subprocess.run([sys.executable, "-m", "aisys_grader.cli", "sandbox"], capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode in (0, 1) and probe.stdout.strip(), probe.stderr
