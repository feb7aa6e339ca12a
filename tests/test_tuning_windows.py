"""Long epochs tuned in windows: the loader restarted mid-epoch at the same sampler position, at another setting."""

from __future__ import annotations

import gc
import sqlite3
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter
from torchdata.stateful_dataloader import StatefulDataLoader

from collector import watch
from collector.record import tuning, windows
from collector.record.loader_setting import setting_of
from collector.tune.answers import Proposal
from collector.tune.policy import Setting

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),  # torchdata 0.11 on torch 2.13
    pytest.mark.slow,  # worker processes started mid-epoch: about 20 s
]


class Slow(Dataset):
    """I/O-like: each item waits (the GIL released), so workers pay."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.tensor([float(i)])


class Offering:
    """The tuner's helper, faked: every poll offers ``change`` against the loader's setting as it was.

    Predicted 10x: far above the spread of 0.3-s windows on a busy machine
    (41-57% beside a 4-process hog), so the noise gate never ends tuning
    before the trial these tests are about.
    """

    pid = None  # no process: nothing for the writer to sample

    def __init__(self, start: Setting, change: dict[str, Any]) -> None:
        self.proposal = Proposal(start, start.but(**change), 10.0, 8.0, 12.0)

    def __call__(self) -> Offering:
        return self

    def poll(self) -> Proposal:
        return self.proposal

    def ask(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def short_windows(monkeypatch):
    monkeypatch.setattr(windows, "LONG_EPOCH_S", 0.3)
    monkeypatch.setattr(windows, "WINDOW_S", 0.3)


def seen(loader: Any, db: str | None, epochs: int = 2) -> list[list[float]]:
    if db is None:
        return [batch[:, 0].tolist() for _ in range(epochs) for batch in loader]
    with watch(loader, db=db, tune=True) as watched:
        return [batch[:, 0].tolist() for _ in range(epochs) for batch in watched]


def trials(db: str) -> list[tuple[int, int, str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT epoch, start_idx, setting, kept FROM trials ORDER BY rowid").fetchall()


def test_a_long_epoch_restarts_mid_epoch_at_more_workers_with_the_same_samples_in_order(
    db_path, short_windows, monkeypatch
):
    def loader(sleep_s: float = 0.01) -> DataLoader:
        return DataLoader(Slow(240, sleep_s), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))

    plain = seen(loader(0.0), None)  # the order does not depend on the items' time
    tuned_loader = loader()
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(tuned_loader), {"num_workers": 3}))
    # windows long enough that 3 fresh workers' start (slower beside a larger torch) leaves them most of one
    monkeypatch.setattr(windows, "LONG_EPOCH_S", 0.6)
    monkeypatch.setattr(windows, "WINDOW_S", 0.6)
    torch.manual_seed(11)
    tuned = seen(tuned_loader, db_path)
    after = torch.rand(1)
    torch.manual_seed(11)
    seen(loader(0.0), None)
    assert tuned == plain
    assert torch.equal(after, torch.rand(1))  # the global generator where the untuned loop leaves it
    (first, *_) = trials(db_path)
    assert first[0] == 0 and first[1] > 0 and '"num_workers": 3' in first[2] and first[3] == 1
    assert tuned_loader.num_workers == 3


def test_a_reverted_window_goes_back_mid_epoch_and_the_sampler_is_the_users_again(db_path, short_windows, monkeypatch):
    def loader(sleep_s: float = 0.01) -> DataLoader:
        return DataLoader(
            Slow(160, sleep_s), batch_size=4, num_workers=2, persistent_workers=True, shuffle=True,
            generator=torch.Generator().manual_seed(5),
        )  # fmt: skip

    plain = seen(loader(0.0), None, epochs=3)  # the order does not depend on the items' time
    tuned_loader = loader()
    start = setting_of(tuned_loader)
    monkeypatch.setattr(tuning, "Advisor", Offering(start, {"num_workers": 1, "persistent_workers": False}))
    assert seen(tuned_loader, db_path, epochs=3) == plain
    reverted = [t for t in trials(db_path) if t[1] > 0 and not t[3]]
    assert reverted, trials(db_path)
    assert tuned_loader.batch_sampler.__class__.__name__ == "BatchSampler"  # the lent sampler given back
    assert len(tuned_loader) == 40


def test_a_stateful_loader_restarts_through_its_state_dict_and_waits_for_the_epoch_to_change_workers(
    db_path, short_windows, monkeypatch
):
    def loader(sleep_s: float = 0.01) -> StatefulDataLoader:  # type: ignore[type-arg]
        return StatefulDataLoader(
            Slow(400, sleep_s), batch_size=4, num_workers=2, shuffle=True, generator=torch.Generator().manual_seed(9)
        )  # epochs of about 2 s: several windows of 0.3 s in the first, on a busy machine too

    plain = seen(loader(0.0), None, epochs=3)  # the order does not depend on the items' time
    tuned_loader = loader()
    start = setting_of(tuned_loader)
    monkeypatch.setattr(tuning, "Advisor", Offering(start, {"prefetch_factor": 4}))
    assert seen(tuned_loader, db_path) == plain[:200]
    assert any(t[1] > 0 and '"prefetch_factor": 4' in t[2] for t in trials(db_path)), trials(db_path)
    resumed = loader(0.0)  # the user's own checkpoint, taken after the restarts, resumes where the untuned one would
    resumed.load_state_dict(tuned_loader.state_dict())
    assert seen(resumed, None, epochs=1) == plain[200:]

    held_loader = loader()
    monkeypatch.setattr(tuning, "Advisor", Offering(start, {"num_workers": 3}))
    assert seen(held_loader, db_path) == plain[:200]
    rows = [t for t in trials(db_path) if '"num_workers": 3' in t[2]]
    assert rows and all(t[1] == 0 for t in rows)  # a StatefulDataLoader changes workers only at an epoch's start


def test_route_names_how_each_loader_restarts():
    class Own(DataLoader):
        def __iter__(self):
            return super().__iter__()

    data = Slow(8, 0.0)
    assert windows.route(DataLoader(data)) == "sampler"
    assert windows.route(StatefulDataLoader(data)) == "state"
    assert windows.route(Own(data)) is None
    assert windows.route(DataLoader(data, num_workers=1, in_order=False)) is None
    assert windows.restartable("state", Setting(2, 2, 2), Setting(3, 2, 2)) is False
    assert windows.restartable("sampler", Setting(0, 2, None), Setting(3, 2, 2)) is True


def test_a_tuned_epoch_with_workers_ends_its_workers_when_the_loop_lets_go_without_a_collection(db_path, monkeypatch):
    """No reference cycle holds a windowed epoch's iterator: its workers end with it, not at a later gc."""
    loader = DataLoader(Slow(16, 0.0), batch_size=4, num_workers=1)
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(loader), {"prefetch_factor": 4}))

    def live_iterators() -> int:
        return sum(type(o) is _MultiProcessingDataLoaderIter for o in gc.get_objects()) - before

    before = 0
    gc.collect()  # earlier tests' garbage is not this test's
    before = live_iterators()
    gc.disable()
    try:
        with watch(loader, db=db_path, tune=True) as watched:
            for _ in range(3):
                it = iter(watched)
                assert live_iterators() == 1
                next(it)
                del it  # the loop breaks out
                assert live_iterators() == 0
    finally:
        gc.enable()
