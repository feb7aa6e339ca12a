"""Experiment trackers: watch(log=fn) and the callbacks' figures, read back from TensorBoard, W&B and MLflow themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fixture_datasets import SlowDataset
from helpers import collector_messages
from torch.utils.data import DataLoader
from tracker_files import mlflow_metrics, tensorboard_scalars, tensorboard_texts, wandb_run

import collector
from collector.record.watch import WATCH_KEYWORDS, watch_with

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "scripts"
KEYS = ("stallwatch/waiting_for_data", "stallwatch/wait_ms", "stallwatch/step_ms", "stallwatch/batches_ready")
BATCHES = 48  # 3 epochs of 64 items in batches of 4


@pytest.mark.slow  # imports the figures' reader (pandas): about 1 s
def test_log_is_called_on_the_monitor_thread_every_window_with_the_run_figures(db_path: str) -> None:
    calls: list[tuple[dict[str, float], int, str]] = []
    loader = DataLoader(SlowDataset(24, sleep_s=0.004), batch_size=2)
    watched = watch_with(
        loader, db_path, gpu_hz=0, host_hz=0, log=lambda m, s: calls.append((m, s, threading.current_thread().name))
    )
    batches = [b for _ in range(2) for b in watched]
    watched.close()
    assert [b.tolist() for b in batches] == [b.tolist() for _ in range(2) for b in loader]
    assert calls, "the run's end sends its figures at least"
    assert {thread for _, _, thread in calls} == {"stallwatch-monitor"}  # never the loop's thread
    assert calls[-1][1] == 24  # the step: batches handed out so far
    metrics = calls[-1][0]
    assert set(metrics) == {
        "stallwatch/waiting_for_data",
        "stallwatch/wait_ms",
        "stallwatch/step_ms",
    }  # no queue: no ready
    assert 0.0 <= metrics["stallwatch/waiting_for_data"] <= 1.0 and metrics["stallwatch/wait_ms"] >= 3.0


def test_a_log_function_that_raises_is_warned_about_once_and_the_loop_goes_on(db_path: str, collector_warnings):
    calls = []

    def broken(metrics: dict[str, float], step: int) -> None:
        calls.append(step)
        raise RuntimeError("tracker offline")

    loader = DataLoader(SlowDataset(8), batch_size=2)
    watched = watch_with(loader, db_path, gpu_hz=0, host_hz=0, log=broken, log_window_s=0.01)
    assert [b.tolist() for b in watched] == [b.tolist() for b in loader]
    watched.close()
    assert len(calls) == 1
    assert [m for m in collector_messages(collector_warnings) if "tracker offline" in m] == [
        "stallwatch: log= raised RuntimeError: tracker offline; stallwatch calls it no more in this run"
    ]


def test_log_must_be_a_function_and_is_a_watch_keyword(db_path: str) -> None:
    assert "log" in WATCH_KEYWORDS
    with pytest.raises(TypeError, match=r"log must be a function called as log\(metrics, step\)"):
        collector.watch([1, 2], db=db_path, log="wandb")  # type: ignore[arg-type]


def run_script(kind: str, out: Path) -> dict[str, list[float]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(SCRIPTS)]),
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(out),
        "WANDB_SILENT": "true",
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3's local file store, kept for offline use
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "fw_trackers.py"), str(out), kind],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(x[len("RESULT ") :]) for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return {r["mode"]: r["losses"] for r in lines}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain", "lightning", "hf"])
def test_each_tracker_reads_back_the_figures_and_the_loss_is_bit_identical_with_and_without_stallwatch(
    kind: str, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is in requirements-dev.txt")
    pytest.importorskip("wandb", reason="wandb is in requirements-dev.txt")
    pytest.importorskip("mlflow", reason="mlflow-skinny is in requirements-dev.txt")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    losses = run_script(kind, tmp_path)
    assert len(losses["none"]) >= 24 and losses["stallwatch"] == losses["none"]  # ==: every bit
    prefix = "train/" if kind == "hf" else ""  # the Trainer's TensorBoard and W&B integrations prefix train/
    board = tensorboard_scalars(str(tmp_path))
    history, summary = wandb_run(str(tmp_path))
    _, flow = mlflow_metrics(f"file://{tmp_path}/mlruns", _mlflow_run(tmp_path))
    for key in KEYS:
        assert board[prefix + key] and flow[key], key
        assert any(prefix + key in row for row in history), key
    for values in (board[prefix + KEYS[0]], flow[KEYS[0]]):
        assert all(0.0 <= v <= 1.0 for _, v in values)
    if kind == "plain":
        logged = json.loads((tmp_path / "logged.json").read_text())["logged"]
        assert len(logged) >= 2 and logged[-1][1] == BATCHES  # every window, and the run's end
        assert {thread for _, _, thread in logged} == {"stallwatch-monitor"}
        sent = {key: [(step, m[key]) for m, step, _ in logged] for key in KEYS}
        for key in KEYS:  # each tracker holds exactly what log() was given (TensorBoard: as float32)
            assert flow[key] == sent[key]
            assert [(s, pytest.approx(v, rel=1e-6)) for s, v in sent[key]] == board[key]
            rows = [(row["stallwatch/batches"], row[key]) for row in history if key in row]
            assert rows == sent[key]
    if kind == "lightning":  # the verdict as text where the logger takes text
        (text,) = tensorboard_texts(str(tmp_path))["stallwatch/verdict/text_summary"]
        assert "DataLoader(s) recorded" in text and "train (run 1)" in text
        assert "train (run 1)" in summary["stallwatch/verdict"]
        artifacts = list((tmp_path / "mlruns").glob("*/*/artifacts/stallwatch/verdict.txt"))
        assert len(artifacts) == 1 and "train (run 1)" in artifacts[0].read_text()


def _mlflow_run(out: Path) -> str | None:
    if (out / "logged.json").exists():
        return str(json.loads((out / "logged.json").read_text())["mlflow_run"])
    if (out / "mlflow_run.txt").exists():
        return (out / "mlflow_run.txt").read_text()
    return None


@pytest.mark.slow  # imports Lightning
def test_the_callbacks_take_log_false(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from collector.lightning import StallwatchCallback

    callback = StallwatchCallback(str(tmp_path / "x.sqlite"), log=False)
    assert callback._recording.figures() is None and callback._recording.log is False
