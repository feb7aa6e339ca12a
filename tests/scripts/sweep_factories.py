"""Loader factories of known cost for sweep tests: ``python -m collector sweep THIS_FILE:make_capped``."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_S = 0.005  # one read from storage
READERS = 2  # the storage serves this many reads at once
BATCH = 4


class CappedStorageDataset(Dataset[torch.Tensor]):
    """Slow storage that serves ``readers`` reads at a time: more workers than that cannot help.

    Each sample holds one of ``readers`` slots for ``sample_s`` (sleeping, no CPU), so
    throughput is min(workers, readers) / sample_s samples per second, whatever the cores.
    """

    def __init__(self, length: int, sample_s: float = SAMPLE_S, readers: int = READERS) -> None:
        self.length = length
        self.sample_s = sample_s
        self.slots = multiprocessing.get_context().Semaphore(readers)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        with self.slots:
            time.sleep(self.sample_s)
        return torch.full((8,), float(index))


def make_capped(batch_size: int = BATCH, **loader_kwargs: Any) -> DataLoader[torch.Tensor]:
    """Ideal: 2 workers unpaced (the storage's two readers); 1 worker keeps a 30 ms step fed."""
    return DataLoader(CappedStorageDataset(1_000_000), batch_size=batch_size, **loader_kwargs)


def make_failing_prefetch4(batch_size: int = BATCH, **loader_kwargs: Any) -> DataLoader[torch.Tensor]:
    """As ``make_capped``, but refuses prefetch_factor=4 the way a user's factory might."""
    if loader_kwargs.get("prefetch_factor") == 4:
        raise RuntimeError("this factory does not support prefetch_factor=4")
    return make_capped(batch_size, **loader_kwargs)


def not_a_loader(**loader_kwargs: Any) -> int:
    return 42


def make_slow_start(batch_size: int = BATCH, **loader_kwargs: Any) -> DataLoader[torch.Tensor]:
    """As ``make_capped``, but each worker takes 0.5 s to start (a cache built in worker_init_fn)."""
    from collector.cli.demo import SlowStartWorker

    return DataLoader(
        CappedStorageDataset(1_000_000), batch_size=batch_size, worker_init_fn=SlowStartWorker(0.5), **loader_kwargs
    )
