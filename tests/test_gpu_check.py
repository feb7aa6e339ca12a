"""bench/gpu_check.py, the check prepared for an NVIDIA machine: its CPU paths, here without a GPU."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from helpers import REPO


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_gpu_check_runs_on_the_cpu_and_skips_only_what_needs_a_gpu(tmp_path, capsys):
    gpu_check = load_gpu_check()
    code = gpu_check.main(
        ["--device", "cpu", "--seconds", "2", "--cpu-ms", "0.2", "--workers", "2", "--db", str(tmp_path / "g.sqlite")]
    )
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert len(lines) == 5, out
    gpu_only = ("NVML samples", "sawtooth", "CUDA-event idle", "pageable_memory")
    for line in lines:
        if any(what in line for what in gpu_only):
            assert line.startswith("SKIP"), line
    prediction = next(line for line in lines if "predicted against measured" in line)
    assert "num_workers=" in prediction or "no num_workers suggestion" in prediction
    assert code == (1 if prediction.startswith("FAIL") else 0)
    assert "num_workers=0 pin_memory=False" in out and "num_workers=2 pin_memory=True" in out


def test_the_gpu_check_refuses_cuda_without_a_gpu(capsys):
    gpu_check = load_gpu_check()
    if gpu_check.torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    assert gpu_check.main(["--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().out
