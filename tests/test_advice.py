"""Every suggested line constructs against the loader it was recorded from, and speaks the framework's terms."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from diagnosis_fixtures import write_synthetic
from test_diagnosis_rules import CASES
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset, Sampler, TensorDataset

from collector.diagnosis import diagnose
from collector.record.runinfo import loader_config

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
DATA = TensorDataset(torch.arange(64.0))


class Pairs(Sampler[list[int]]):
    """A custom batch_sampler: it decides the order itself."""

    def __iter__(self) -> Iterator[list[int]]:
        return iter([[i, i + 1] for i in range(0, 64, 2)])

    def __len__(self) -> int:
        return 32


class Stream(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(64.0))


# (dataset, the arguments the user's DataLoader(...) was built with, stage)
LOADERS: dict[str, tuple[Any, dict[str, Any], str | None]] = {
    "default sampler": (DATA, {"batch_size": 4}, None),
    "DistributedSampler": (DATA, {"batch_size": 4, "sampler": DistributedSampler(DATA, 2, 0, shuffle=False)}, None),
    "batch_sampler": (DATA, {"batch_sampler": Pairs()}, None),
    "BatchSampler in order": (DATA, {"batch_sampler": BatchSampler(range(64), 4, drop_last=False)}, None),  # type: ignore[arg-type]
    "IterableDataset": (Stream(), {"batch_size": 4}, None),
    "val loader": (DATA, {"batch_size": 4}, "val"),
    "iterated under no_grad": (DATA, {"batch_size": 4}, None),  # a plain evaluation loop: recorded with grad off
}
WORKER_ARGS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
ADVISED = [case for case in CASES if case not in ("healthy without workers", "healthy with workers")]


def recorded(loader_kind: str, case: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The real DataLoader built as the user would, with the case's worker settings; and its recorded config."""
    dataset, kwargs, _ = LOADERS[loader_kind]
    workers = {k: v for k, v in CASES[case][0].config.items() if k in WORKER_ARGS}
    kwargs = {**kwargs, **workers}
    with torch.set_grad_enabled(loader_kind != "iterated under no_grad"):
        return dataset, kwargs, loader_config(DataLoader(dataset, **kwargs))


def advise(tmp_path: Path, case: str, config: dict[str, Any], stage: str | None, framework: str | None) -> Any:
    path = str(tmp_path / f"{abs(hash((case, stage, framework, str(config))))}.sqlite")
    tags = {} if framework is None else {"framework": framework}
    write_synthetic(path, dataclasses.replace(CASES[case][0], config=config, stage=stage, tags=tags))
    return diagnose(path)


def construct(line: str, dataset: Any, kwargs: dict[str, Any], tmp_path: Path) -> Any:
    """Evaluate the pasted line as written; ``...`` stands for the arguments the user already passes."""

    def data_loader(*_: Any, **changed: Any) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(dataset, **{**kwargs, **changed})

    def training_arguments(*_: Any, **changed: Any) -> Any:
        from transformers import TrainingArguments

        return TrainingArguments(output_dir=str(tmp_path / "hf"), report_to=[], use_cpu=True, **changed)

    namespace = {
        "DataLoader": data_loader,
        "DistributedSampler": functools.partial(DistributedSampler, num_replicas=2, rank=0),
        "dataset": dataset,
        "TrainingArguments": training_arguments,
    }
    return eval(line, namespace)


@pytest.mark.parametrize("loader_kind", list(LOADERS))
@pytest.mark.parametrize("case", ADVISED)
def test_every_suggested_line_constructs_against_the_loader_it_was_recorded_from(
    tmp_path: Path, case: str, loader_kind: str
) -> None:
    dataset, kwargs, config = recorded(loader_kind, case)
    stage = LOADERS[loader_kind][2]
    report = advise(tmp_path, case, config, stage, None)
    line = report.code_change()
    if line is None:
        return
    built = construct(line, dataset, kwargs, tmp_path)
    for s in report.suggestions:
        if s.parameter in WORKER_ARGS:
            assert getattr(built, s.parameter) == s.suggested, line
    if loader_kind != "default sampler":
        assert "shuffle=True)" not in line.replace("DistributedSampler(dataset, shuffle=True)", ""), line


@pytest.mark.parametrize(
    ("loader_kind", "expected"),
    [
        ("default sampler", "shuffle=True"),
        ("DistributedSampler", "sampler=DistributedSampler(dataset, shuffle=True)"),
        ("batch_sampler", None),
        ("BatchSampler in order", None),
        ("IterableDataset", None),
        ("val loader", None),
        ("iterated under no_grad", None),
    ],
)
def test_shuffle_is_suggested_only_where_the_loader_can_take_it(
    tmp_path: Path, loader_kind: str, expected: str | None
) -> None:
    case = "bursts empty a shallow queue"  # uneven batches in dataset order
    dataset, kwargs, config = recorded(loader_kind, case)
    report = advise(tmp_path, case, config, LOADERS[loader_kind][2], None)
    line = report.code_change()
    assert line is not None and "prefetch_factor=" in line
    if expected is None:
        assert "shuffle" not in line
    else:
        assert expected in line
        built = construct(line, dataset, kwargs, tmp_path)
        assert isinstance(built.sampler, (torch.utils.data.RandomSampler, DistributedSampler))
    if loader_kind in ("batch_sampler", "BatchSampler in order", "IterableDataset"):
        assert any("shuffle there" in note for note in report.notes)


@pytest.mark.parametrize(
    "case", ["io-bound workers, too few", "bursts empty a shallow queue", "workers restart every epoch"]
)
@pytest.mark.slow
def test_hugging_face_runs_get_training_arguments_that_construct(tmp_path: Path, case: str) -> None:
    dataset, kwargs, config = recorded("default sampler", case)
    line = advise(tmp_path, case, config, "train", "hf").code_change()
    assert line is not None and line.startswith("TrainingArguments(..., dataloader_num_workers=")
    assert "shuffle" not in line  # the Trainer shuffles training data itself
    built = construct(line, dataset, kwargs, tmp_path)
    assert built.dataloader_num_workers >= 1


@pytest.mark.parametrize(("stage", "hook"), [("train", "train_dataloader"), ("val", "val_dataloader")])
def test_lightning_runs_name_the_hook_to_change(tmp_path: Path, stage: str, hook: str) -> None:
    dataset, kwargs, config = recorded("DistributedSampler", "bursts empty a shallow queue")  # Lightning injected it
    line = advise(tmp_path, "bursts empty a shallow queue", config, stage, "lightning").code_change()
    assert line is not None and line.endswith(f"# in {hook}() of your LightningDataModule or LightningModule")
    assert ("shuffle=True" in line) is (stage == "train")  # Lightning builds its DistributedSampler from it
    construct(line, dataset, {k: v for k, v in kwargs.items() if k != "sampler"}, tmp_path)


def test_settings_that_need_workers_are_dropped_when_the_advice_is_no_workers():
    """The epoch-stall demo once got num_workers=0 and persistent_workers=True together: a line that raises."""
    from torch.utils.data import DataLoader

    from collector.diagnosis.model import Setting

    recorded = Setting(num_workers=2, threads=1, prefetch_factor=4, persistent_workers=True)
    none = recorded.but(num_workers=0)
    assert recorded.changed(none) == {"num_workers": 0}
    DataLoader(list(range(4)), prefetch_factor=none.prefetch_factor, persistent_workers=none.persistent_workers)
    with pytest.raises(ValueError):
        DataLoader(list(range(4)), num_workers=0, prefetch_factor=4, persistent_workers=True)
    assert recorded.but(num_workers=0).but(num_workers=2).prefetch_factor == 2  # back to the default with workers
