"""An unmodified training script with two DataLoaders, for ``collector run`` tests.

usage: two_loaders.py EXIT_CODE [--fail] [anything else is echoed]
Prints its sys.argv, trains over a train and a val loader, then exits with
EXIT_CODE, or raises ValueError("loss is NaN") with --fail.
"""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    print("argv:", sys.argv)
    data = TensorDataset(torch.arange(64.0).unsqueeze(1), torch.arange(64) % 2)
    train = DataLoader(data, batch_size=4, shuffle=True, num_workers=1)
    val = DataLoader(data, batch_size=16)
    model = torch.nn.Linear(1, 2)
    for _epoch in range(2):
        for x, y in train:
            torch.nn.functional.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for x, _ in val:
            model(x)
    if "--fail" in sys.argv:
        raise ValueError("loss is NaN")
    print("done")
    sys.exit(int(sys.argv[1]))


if __name__ == "__main__":
    main()
