"""Real image pipelines for the benchmarks: generated JPEGs, PIL decoding and augmentation, a small CNN.

No torchvision (its wheel matching torch 2.13 does not import beside the CPU
torch here): the transforms are PIL and numpy, as a course's ImageFolder
pipeline would be with torchvision's Resize/ToTensor/RandomResizedCrop.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter
from torch import nn
from torch.utils.data import Dataset

CLASSES = 4
SIDE_PX = 512  # the generated photos' side
INPUT_PX = 64  # what the network sees


def make_jpegs(root: str | os.PathLike[str], count: int, *, side_px: int = SIDE_PX, seed: int = 0) -> Path:
    """``count`` JPEGs of ``side_px`` squared in ImageFolder layout (root/class_k/i.jpg); kept if already there."""
    root = Path(root)
    done = root / f".complete-{count}-{side_px}"
    if done.exists():
        return root
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side_px, 0:side_px].astype(np.float32) / side_px
    for i in range(count):
        label = i % CLASSES
        folder = root / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        # smooth gradients plus noise: compresses like a photo (about 40-80 kB at 512 px), not like flat colour
        phase = rng.uniform(0, 6)
        base = np.stack([np.sin(xx * (3 + label) + phase) + np.cos(yy * (2 + c)) + xx * yy for c in range(3)])
        pixels = (base * 45 + 128 + rng.normal(0, 24, (3, side_px, side_px))).clip(0, 255)
        Image.fromarray(pixels.transpose(1, 2, 0).astype(np.uint8)).save(folder / f"{i:05d}.jpg", quality=90)
    done.touch()
    return root


def to_tensor(image: Image.Image) -> torch.Tensor:
    """HWC uint8 -> CHW float in [0, 1], as torchvision's ToTensor."""
    return torch.from_numpy(np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0)


def light(image: Image.Image, rng: random.Random) -> Image.Image:
    """Resize only."""
    return image.resize((INPUT_PX, INPUT_PX), Image.BILINEAR)


def heavy(image: Image.Image, rng: random.Random) -> Image.Image:
    """A training augmentation: random resized crop, flip, rotation, colour jitter and blur, at full resolution."""
    w, h = image.size
    scale = rng.uniform(0.5, 1.0)
    cw, ch = int(w * scale), int(h * scale)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    image = image.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    image = image.rotate(rng.uniform(-15, 15), resample=Image.BILINEAR)
    image = ImageEnhance.Color(image).enhance(rng.uniform(0.6, 1.4))
    image = ImageEnhance.Contrast(image).enhance(rng.uniform(0.6, 1.4))
    image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.1, 1.5)))
    return image.resize((INPUT_PX, INPUT_PX), Image.BILINEAR)


TRANSFORMS = {"light": light, "heavy": heavy}


class JpegFolder(Dataset):
    """An ImageFolder: decode a JPEG with PIL, transform it, return (CHW tensor, label)."""

    def __init__(self, root: str | os.PathLike[str], transform: str = "light", *, seed: int = 0) -> None:
        self.items = sorted((p, int(p.parent.name.split("_")[1])) for p in Path(root).glob("class_*/*.jpg"))
        if not self.items:
            raise FileNotFoundError(f"no class_*/*.jpg under {root}: make them with make_jpegs()")
        self.transform = TRANSFORMS[transform]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        with Image.open(path) as raw:
            image = raw.convert("RGB")
        return to_tensor(self.transform(image, random.Random(self.seed * 1_000_003 + index))), label


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head: a few milliseconds a batch of 64 px images on two cores."""

    def __init__(self, classes: int = CLASSES, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(2 * width * 16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class CourseCNN(nn.Module):
    """A course's classifier: four 3x3 convolutions of 10 channels and a linear head (about 30k parameters).

    Its step is short (tens of ms a batch of 32 on two cores), so workers and intra-op threads that share
    the cores with it change its speed more than its loading's: the class a held-out program showed.
    """

    def __init__(self, classes: int = 10, width: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(width * (INPUT_PX // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


NETS: dict[str, type[nn.Module]] = {"small": SmallCNN, "course": CourseCNN}
# pipeline -> (network, transform): the bench's own CNN, and a course's smaller one with a short step
PIPELINES = {
    "light": ("small", "light"),
    "heavy": ("small", "heavy"),
    "course-light": ("course", "light"),
    "course-heavy": ("course", "heavy"),
}
