"""Who is iterating: the user's own line of code, and the framework stage (Lightning, Hugging Face) around it."""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from types import FrameType
from typing import Any

from collector.record.origin import PACKAGE_DIR

# NOTE [ Library frames ]
# A run is named after the user's own line: the innermost frame that is not
# stallwatch, not an installed package (site-packages, dist-packages) and not
# the standard library. Lightning builds and rebuilds loaders inside
# lightning/fabric/utilities/data.py and accelerate inside
# accelerate/data_loader.py; the line that matters to the user is the
# DataModule's `DataLoader(...)` or the script's `trainer.fit(...)`.
_STDLIB = tuple(
    {os.path.join(p, "") for p in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")) if p}
)
_PACKAGES = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")

# Lightning's RunningStage values, as runs.stage spells them.
LIGHTNING_STAGES = {"train": "train", "sanity_check": "val", "validate": "val", "test": "test", "predict": "predict"}
# Hugging Face Trainer methods that iterate a loader; evaluation_loop serves both evaluate and predict.
HF_STAGES = {"_inner_training_loop": "train", "evaluate": "val", "predict": "predict"}
MAX_DEPTH = 200


@dataclass(frozen=True)
class Context:
    """Where a loader is being iterated: the framework (or None for a plain loop) and its stage."""

    framework: str | None  # "lightning" | "hf" | None
    stage: str | None  # "train" | "val" | "test" | "predict" | None


def is_library(filename: str) -> bool:
    """True for stallwatch, installed packages, the standard library and the interpreter's own code."""
    if filename.startswith("<") or filename.startswith(PACKAGE_DIR):
        return True
    if any(part in filename for part in _PACKAGES):
        return True
    return filename.startswith(_STDLIB)


def user_line(frame: FrameType | None, cwd: str) -> str | None:
    """``file:line`` of the innermost frame in the user's own code (see NOTE [ Library frames ]), or None."""
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        if not is_library(frame.f_code.co_filename):
            return f"{_relative(frame.f_code.co_filename, cwd)}:{frame.f_lineno}"
        frame = frame.f_back
        depth += 1
    return None


def _relative(path: str, cwd: str) -> str:
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


def context(frame: FrameType | None) -> Context:
    """The framework and stage iterating now, read from the call stack; ``Context(None, None)`` for a plain loop."""
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        filename = frame.f_code.co_filename
        if f"{os.sep}lightning{os.sep}" in filename or f"{os.sep}pytorch_lightning{os.sep}" in filename:
            stage = _lightning_stage(frame.f_locals.get("self"))
            if stage is not None:
                return Context("lightning", stage)
        elif filename.endswith(f"transformers{os.sep}trainer.py") and frame.f_code.co_name in HF_STAGES:
            return Context("hf", HF_STAGES[frame.f_code.co_name])
        frame = frame.f_back
        depth += 1
    return Context(None, None)


def _lightning_stage(obj: Any) -> str | None:
    try:  # a LightningModule's trainer property raises RuntimeError when it is not attached
        trainer = obj if hasattr(obj, "state") and hasattr(obj, "fit_loop") else getattr(obj, "trainer", None)
        stage = getattr(getattr(trainer, "state", None), "stage", None)
    except (AttributeError, RuntimeError):
        return None
    value = getattr(stage, "value", stage)
    return LIGHTNING_STAGES.get(value) if isinstance(value, str) else None
