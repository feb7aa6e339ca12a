"""Datasets with known costs for tests: picklable (spawn) and deterministic."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SlowDataset(Dataset[torch.Tensor]):
    """Starves the loop on purpose: each sample sleeps ``sleep_s``."""

    def __init__(self, length: int, sleep_s: float = 0.0) -> None:
        self.length = length
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.tensor([float(index)])


class FailingDataset(SlowDataset):
    """Raises a ValueError with a known message at ``bad_index``."""

    def __init__(self, length: int, bad_index: int) -> None:
        super().__init__(length)
        self.bad_index = bad_index

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad_index:
            raise ValueError(f"corrupt sample {index}")
        return super().__getitem__(index)


class HelperThreadDataset(Dataset[torch.Tensor]):
    """Each sample's CPU work runs on a helper thread while the calling thread waits (as torch's intra-op threads do)."""

    def __init__(self, length: int, cpu_s: float) -> None:
        self.length = length
        self.cpu_s = cpu_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        import threading

        def burn() -> None:
            end = time.thread_time() + self.cpu_s
            while time.thread_time() < end:
                pass

        helper = threading.Thread(target=burn)
        helper.start()
        helper.join()
        return torch.tensor([float(index)])
