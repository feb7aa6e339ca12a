"""Advice that constructs: a shuffle change only where the loader can take one (NOTE [ Advice that constructs ])."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collector.diagnosis.report_types import Suggestion

# NOTE [ Advice that constructs ]
# Every line the report prints must construct against the loader it was
# recorded from. DataLoader raises ValueError for shuffle=True beside a
# sampler, a batch_sampler or an IterableDataset, and prefetch_factor or
# persistent_workers without workers; evaluation loaders have no reason to
# shuffle. So shuffle is suggested only where the recorded configuration
# (runinfo.loader_config: shuffle, sampler, batch_sampler, iterable_dataset)
# and the stage allow it: as DataLoader(shuffle=True) with the default
# sampler, as sampler=DistributedSampler(dataset, shuffle=True) beside a
# DistributedSampler, and not at all elsewhere (a note says where the order
# is decided instead). An evaluation loader (a framework's val/test/predict
# stage, or one iterated under torch.no_grad(): runinfo's grad_enabled) gets
# no shuffle advice at all. tests/test_advice.py builds every line.
EVALUATION = ("val", "test", "predict")
DISTRIBUTED_SHUFFLE = "DistributedSampler(dataset, shuffle=True)"
UNEVEN = "batches cost unevenly in dataset order; shuffling spreads the slow samples over all batches"


def shuffle_advice(loader: Mapping[str, Any]) -> tuple[Suggestion | None, str | None]:
    """(the shuffle change, or a note where none can be pasted) for a loader whose batches cost unevenly."""
    framework = loader.get("framework")
    if evaluating(loader):
        return None, None  # order does not matter when evaluating: the cost is the same, shuffled or not
    shuffle = loader.get("shuffle")
    if shuffle is True:
        return None, None
    if shuffle is None:
        where = "the IterableDataset's own stream" if loader.get("iterable_dataset") else None
        if where is None and loader.get("batch_sampler") is not None and loader.get("batch_size") is None:
            where = f"your batch_sampler ({loader.get('batch_sampler')})"
        if where is None:
            return None, None
        return None, f"Batches cost unevenly in order; the order comes from {where}: shuffle there"
    if framework == "hf":
        return None, None  # the Trainer shuffles training data itself
    if loader.get("sampler") == "DistributedSampler" and framework != "lightning":
        reason = f"{UNEVEN}; call sampler.set_epoch(epoch) every epoch so each one is shuffled anew"
        return _shuffle("sampler", "DistributedSampler(shuffle=False)", DISTRIBUTED_SHUFFLE, reason), None
    if framework == "lightning" and loader.get("sampler") == "DistributedSampler":
        return _shuffle("shuffle", False, True, f"{UNEVEN}; Lightning builds its DistributedSampler from it"), None
    return _shuffle("shuffle", False, True, UNEVEN), None


def evaluating(loader: Mapping[str, Any]) -> bool:
    """An evaluation loader: a framework's val/test/predict stage, or iterated with autograd off (``no_grad``)."""
    return loader.get("stage") in EVALUATION or loader.get("grad_enabled") is False


def _shuffle(parameter: str, current: Any, suggested: Any, reason: str) -> Suggestion:
    return Suggestion(
        parameter=parameter,
        current=current,
        suggested=suggested,
        reason=reason,
        expected_speedup=None,
        rule_of_thumb=True,
    )
