"""Real-hardware checks: CUDA idle events and NVML. Skipped on machines without an NVIDIA GPU."""

from __future__ import annotations

import pytest
import torch
from fixture_datasets import SlowDataset
from torch.utils.data import DataLoader

import collector
from collector.store.reader import Reader

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def test_gpu_idle_and_nvml_samples_on_a_real_gpu(db_path):
    device = torch.device("cuda")
    weights = torch.randn(4096, 4096, device=device)
    loader = DataLoader(SlowDataset(40, sleep_s=0.005), batch_size=4, pin_memory=True)
    with collector.watch(loader, db=db_path, gpu_hz=20, host_hz=2) as watched:
        for batch in watched:
            x = batch.to(device, non_blocking=True)
            for _ in range(20):  # a few ms of queued GPU work per step
                weights = torch.tanh(weights @ weights) + x.mean()
        run_id = watched.run_id
    torch.cuda.synchronize()
    reader = Reader(db_path)
    batches = reader.batches(run_id)
    assert batches.gpu_idle_s.notna().mean() > 0.9
    assert (batches.gpu_idle_s <= batches.wait_s + 0.005).all()
    assert batches.pinned.dropna().eq(1).all()
    gpu = reader.gpu_samples(run_id)
    assert len(gpu) > 0 and gpu.mem_used_bytes.notna().all()
    assert reader.run(run_id)["host"]["gpus"]
