"""The demo's datasets (they import torch, so ``collector.cli.demo`` loads them only when a demo runs)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SleepDataset(Dataset[tuple[torch.Tensor, int]]):
    """Imitates reading from slow storage: each sample sleeps ``sleep_s`` (no CPU used)."""

    def __init__(self, length: int, sleep_s: float, features: int = 256) -> None:
        self.length = length
        self.sleep_s = sleep_s
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.sleep_s)
        return torch.full((self.features,), float(index % 97)), index % 10


class ComputeDataset(Dataset[tuple[torch.Tensor, int]]):
    """Imitates decoding and augmenting: each sample keeps one core busy for ``cpu_s``."""

    def __init__(self, length: int, cpu_s: float, features: int = 256) -> None:
        self.length = length
        self.cpu_s = cpu_s
        self.features = features

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        end = time.thread_time() + self.cpu_s
        x = float(index)
        while time.thread_time() < end:
            for _ in range(200):
                x = (x * 1.000001 + 0.5) % 1000.0
        return torch.full((self.features,), x), index % 10
