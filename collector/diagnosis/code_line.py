"""The line to paste: a report's suggested settings as the DataLoader, TrainingArguments or Lightning hook call."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LOADER_ARGS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "shuffle", "sampler")
HF_ARGS = {
    "num_workers": "dataloader_num_workers",
    "pin_memory": "dataloader_pin_memory",
    "prefetch_factor": "dataloader_prefetch_factor",
    "persistent_workers": "dataloader_persistent_workers",
}
NEEDS_WORKERS = ("prefetch_factor", "persistent_workers")
LIGHTNING_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader"}
LIGHTNING_HOOKS["predict"] = "predict_dataloader"
THREADS = "torch.set_num_threads"


def code_change(suggested: Iterable[tuple[str, Any]], run: Mapping[str, Any]) -> str | None:
    """(parameter, suggested value) pairs as one line to paste, in the terms of ``run``'s framework and stage.

    See NOTE [ Advice that constructs ] in collector/diagnosis/advice.py.
    """
    pairs = list(suggested)
    threads = next((value for parameter, value in pairs if parameter == THREADS), None)
    line = _loader_line({parameter: value for parameter, value in pairs if parameter in LOADER_ARGS}, run)
    if threads is None:
        return line
    call = f"{THREADS}({threads})"  # the training process's, not the loader's: before the loader's line
    return f"{call}; {line}" if line else call


def _loader_line(chosen: dict[str, Any], run: Mapping[str, Any]) -> str | None:
    if not chosen:
        return None
    framework, stage = run.get("framework"), run.get("stage")
    workers = (run.get("config") or {}).get("num_workers")
    if any(p in chosen for p in NEEDS_WORKERS) and "num_workers" not in chosen and workers:
        chosen = {"num_workers": workers, **chosen}  # the line holds on its own, whatever the defaults
    if framework == "hf":
        args = [f"{HF_ARGS[p]}={v!r}" for p, v in chosen.items() if p in HF_ARGS]
        return f"TrainingArguments(..., {', '.join(args)})" if args else None
    args = [f"{p}={v}" if p == "sampler" else f"{p}={v!r}" for p, v in chosen.items()]
    line = f"DataLoader(..., {', '.join(args)})"
    if framework == "lightning":
        hook = LIGHTNING_HOOKS.get(stage or "train", "train_dataloader")
        line += f"  # in {hook}() of your LightningDataModule or LightningModule"
    return line
