"""A small, ordinary training script to try stallwatch on (it knows nothing about stallwatch).

Its images come from "slow storage" (a read that sleeps) and are "decoded" on
the CPU, as a real image pipeline does. Try:

    python examples/train_toy.py --epochs 1                       # plain
    python -m collector run examples/train_toy.py --epochs 1      # recorded, with a verdict
    python -m collector sweep examples/train_toy.py:make_loader   # tune the loader
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

IMAGE = (3, 32, 32)


class ToyImages(Dataset[tuple[torch.Tensor, int]]):
    """``length`` images: each read waits ``read_s`` (storage) then decodes for ``decode_s`` of CPU."""

    def __init__(self, length: int = 4096, read_s: float = 0.004, decode_s: float = 0.0005) -> None:
        self.length = length
        self.read_s = read_s
        self.decode_s = decode_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.read_s)  # the file read
        end = time.thread_time() + self.decode_s  # the decode and augment
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(IMAGE, generator=generator)
        while time.thread_time() < end:
            image = image * 0.999 + 0.001
        return image, index % 10


def make_loader(
    batch_size: int = 32,
    num_workers: int = 0,
    prefetch_factor: int | None = None,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    **kwargs: Any,
) -> DataLoader[tuple[torch.Tensor, int]]:
    """The training loader; ``python -m collector sweep examples/train_toy.py:make_loader`` tunes it."""
    return DataLoader(
        ToyImages(),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        **kwargs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Train a tiny CNN on toy images.")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=60, help="steps per epoch (0: the whole epoch)")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--step-ms", type=float, default=40.0, help="extra time per step, as a GPU would take")
    args = parser.parse_args()

    train = make_loader(num_workers=args.workers, prefetch_factor=2 if args.workers else None)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 32 * 32, 10)
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    started = time.monotonic()
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(train):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            time.sleep(args.step_ms / 1000)  # the rest of a GPU step
            if args.max_steps and step + 1 >= args.max_steps:
                break
        print(f"epoch {epoch}: loss {loss.item():.3f}, {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
