"""Read back what the trackers wrote, each with its own package: TensorBoard's event reader, W&B's records, MLflow's client."""

from __future__ import annotations

import glob
import json
import os
import struct
from pathlib import Path
from typing import Any

WANDB_BLOCK = 32768  # W&B's .wandb file: a LevelDB log of 32 KiB blocks after a 7-byte header
WANDB_HEADER = 7
FULL, LAST = 1, 4  # LevelDB record kinds that end a record


def tensorboard_scalars(directory: str) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from every event file under ``directory``, read by TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "**", "events.out.tfevents.*"), recursive=True)):
        acc = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def tensorboard_texts(directory: str) -> dict[str, list[str]]:
    """tag -> the texts logged under it (TensorBoard's text plugin stores them as string tensors)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[str]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "**", "events.out.tfevents.*"), recursive=True)):
        acc = EventAccumulator(path, size_guidance={"tensors": 0})
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            for e in acc.Tensors(tag):
                out.setdefault(tag, []).extend(v.decode() for v in e.tensor_proto.string_val)
    return out


def wandb_run(directory: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(history rows, final summary) of the one offline run under ``directory``, decoded with W&B's own protobufs.

    wandb 0.31 reads its files in Go (wandb-core) and ships no Python reader,
    so the LevelDB log framing is undone here; each record is W&B's ``Record``.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(os.path.join(directory, "**", "offline-run-*", "run-*.wandb"), recursive=True)
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    records, pos, chunk = [], WANDB_HEADER, b""
    while pos + 7 <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            records.append(chunk)
            chunk = b""
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for raw in records:
        record = pb.Record()
        record.ParseFromString(raw)
        which = record.WhichOneof("record_type")
        if which == "history":
            history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif which == "summary":
            summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
    return history, summary


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def mlflow_metrics(uri: str, run_id: str | None = None) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """(run id, key -> [(step, value)]) of ``run_id`` (or the one run) in the file store at ``uri``, by MlflowClient."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    if run_id is None:
        experiments = client.search_experiments()
        (run,) = client.search_runs([e.experiment_id for e in experiments])
        run_id = run.info.run_id
    keys = client.get_run(run_id).data.metrics
    return run_id, {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)] for k in keys}
