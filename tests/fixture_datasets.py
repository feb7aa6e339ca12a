"""Datasets with known costs for tests: picklable (spawn) and deterministic."""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


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


class Stream(IterableDataset[torch.Tensor]):
    """``0 .. length-1``, each worker its own stride of it; ``stateful``: its iterator saves and restores its place."""

    def __init__(self, length: int, stateful: bool = True) -> None:
        self.length = length
        self.stateful = stateful

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        place = StreamPlace(list(range(worker, self.length, workers)))
        return place if self.stateful else iter(list(place))


class StreamPlace:
    """A stream's iterator with ``state_dict``/``load_state_dict``: torchdata resumes it in place of fast-forwarding."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.pos = 0

    def __iter__(self) -> StreamPlace:
        return self

    def __next__(self) -> torch.Tensor:
        if self.pos >= len(self.items):
            raise StopIteration
        self.pos += 1
        return torch.tensor([float(self.items[self.pos - 1])])

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]
