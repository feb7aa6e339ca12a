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


class JpegFiles(Dataset[torch.Tensor]):
    """Decodes JPEG files with PIL, then ``transform`` (a torchvision Compose) or a plain resize to ``side``."""

    def __init__(self, paths: list[str], side: int = 16, transform: object = None, sleep_s: float = 0.0) -> None:
        self.paths = paths
        self.side = side
        self.transform = transform
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        if self.sleep_s:
            time.sleep(self.sleep_s)
        image = Image.open(self.paths[index]).convert("RGB")
        if self.transform is not None:
            return self.transform(image)  # type: ignore[operator, no-any-return]
        small = image.resize((self.side, self.side))
        return torch.frombuffer(bytearray(small.tobytes()), dtype=torch.uint8).view(self.side, self.side, 3)


def write_jpegs(folder: str, count: int, side: int) -> list[str]:
    """``count`` smooth RGB JPEGs of ``side`` pixels a side in ``folder``; their paths."""
    import os

    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 255, side, dtype=np.float32)
    paths = []
    for i in range(count):
        pixels = np.stack([np.add.outer(ramp, ramp) / 2, np.add.outer(ramp, -ramp) % 256, np.full((side, side), i)], -1)
        path = os.path.join(folder, f"{i:03d}.jpg")
        Image.fromarray(pixels.astype(np.uint8)).save(path, "JPEG", quality=90)
        paths.append(path)
    return paths


def nap(seconds: float) -> None:
    """Waits ``seconds`` (as a read from slow storage would): a user's own function for the stack sampler to find."""
    time.sleep(seconds)


class NappingDataset(SlowDataset):
    """Each sample waits ``nap_s`` in ``nap``: no torchvision, no PIL, no CPU."""

    def __init__(self, length: int, nap_s: float) -> None:
        super().__init__(length)
        self.nap_s = nap_s

    def __getitem__(self, index: int) -> torch.Tensor:
        nap(self.nap_s)
        return torch.tensor([float(index)])
