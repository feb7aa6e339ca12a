"""Advice from the stage table: what to change inside the pipeline, each priced by the one prediction model."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from collector.diagnosis.calibration import C
from collector.diagnosis.model import EpochModel
from collector.diagnosis.replay import DraftGain
from collector.diagnosis.report_types import Suggestion
from collector.diagnosis.stages import GETITEM, HANDOVER, StageFacts, Stages

# NOTE [ Advice inside the pipeline ]
# Each rule reads the stage table (collector/diagnosis/stages.py) and names a
# saving: a share g of some stages' own time. The one model prices it
# (NOTE [ Sharing the cores ]): the workers' production shrinks by it, their
# CPU a batch by the saved CPU's share of the timed fetches' CPU, their
# blocked time likewise, and the speed-up is the model's epoch now / then at
# the recorded setting. The range is the saving's own: g at its low and high
# end. A rule speaks only where the price reaches C.MIN_SPEEDUP, as the
# loader's advice does.
#
#   fetch  |open|decode..........|Resize|ToTensor|Normalize|collate|
#           \____ deterministic front: cache after it ____/
#                 \__ draft(): decode at the size Resize wants (replayed)
#                                        \__ uint8 to the GPU __/

RANDOM = re.compile(r"^(Random|ColorJitter|AutoAugment|RandAugment|TrivialAugment|AugMix|GaussianBlur|GaussianNoise)")
FLOAT_STEPS = ("ToTensor", "ToDtype", "ConvertImageDtype", "Normalize")
Replay = Callable[[tuple[str, ...], int], DraftGain | None]


def stage_advice(
    st: Stages | None,
    model: EpochModel | None,
    config: Mapping[str, Any],
    *,
    cuda: bool = False,
    batch_nbytes: float | None = None,
    replay: Replay | None = None,
    min_share: float = 0.15,
    min_shrink: float = 4.0,
    min_speedup: float | None = None,
) -> list[Suggestion]:
    """Decode smaller, cache after the deterministic front, uint8 to the GPU, a lighter hand-over: those that pay.

    ``min_share``: of the workers' fetch time a stage must take to be worth advice (chosen); ``min_shrink``: the
    decoded image's pixels over the pipeline's output's for a reduced decode (JPEG's draft scales by 2 to 8 a side).
    """
    if st is None or model is None:
        return []
    pays = C.MIN_SPEEDUP if min_speedup is None else min_speedup
    found = [
        _decode_smaller(st, model, replay, min_share, min_shrink),
        _cache_front(st, model, config, min_share),
        _uint8(st, model, batch_nbytes, min_share) if cuda else None,
        _handover(st, model, batch_nbytes, min_share),
    ]
    return [s for s in found if s is not None and (s.expected_speedup or 0.0) >= pays]


def price(model: EpochModel, st: Stages, saved: list[tuple[StageFacts, float]]) -> float:
    """The job's speed-up when each stage's own time shrinks by its share (NOTE [ Advice inside the pipeline ])."""
    cpu_saved = sum((f.cpu_s if f.cpu_s is not None else f.wall_s) * g for f, g in saved)
    blocked_saved = sum(max(0.0, f.wall_s - (f.cpu_s or f.wall_s)) * g for f, g in saved)
    cpu_cut = min(1.0, cpu_saved / st.fetch_cpu_s) if st.fetch_cpu_s > 0 else 0.0
    blocked_cut = min(1.0, blocked_saved / max(st.fetch_wall_s - st.fetch_cpu_s, 1e-12))
    after = dataclasses.replace(
        model, load_cpu_s=model.load_cpu_s * (1 - cpu_cut), load_blocked_s=model.load_blocked_s * (1 - blocked_cut)
    )
    return model.recorded_epoch_s / max(after.epoch_s(model.recorded), 1e-12)


def _priced(
    model: EpochModel, st: Stages, parts: list[StageFacts], g: float, low: float, high: float, **fields: Any
) -> Suggestion:
    speedups = [price(model, st, [(f, x) for f in parts]) for x in (g, low, high)]
    return Suggestion(
        **fields,
        expected_speedup=round(speedups[0], 2),
        expected_speedup_range=(round(min(speedups), 2), round(max(speedups), 2)),
    )


def _output_pixels(st: Stages) -> float | None:
    sizes = [f.pixels_out for f in st.get("transform ") if f.pixels_out]
    return min(sizes) if sizes else None


def _decode_smaller(
    st: Stages, model: EpochModel, replay: Replay | None, min_share: float, min_shrink: float
) -> Suggestion | None:
    decodes = [f for f in st.get("PIL decode ") if f.row.stage.endswith(("JPEG", "MPO"))]
    out = _output_pixels(st)
    share = sum(f.row.share for f in decodes)
    if not decodes or out is None or share < min_share or replay is None or not st.files:
        return None
    decoded = max(f.pixels_out or 0.0 for f in decodes)
    if decoded / out < min_shrink:
        return None
    gain = replay(st.files, int(math.sqrt(out)))
    if gain is None or gain.saving <= 0:
        return None
    g = gain.saving
    full_size = [f for f in st.get("transform ") if (f.pixels_in or 0.0) >= decoded / 2]  # the shrink and before
    return _priced(
        model,
        st,
        decodes + full_size,
        g,
        g * 0.75,
        min(1.0, g * 1.25),
        parameter="decode_size",
        current=f"{int(math.sqrt(decoded))} px a side",
        suggested=f'img.draft("RGB", ({int(math.sqrt(out))}, {int(math.sqrt(out))})) before load',
        reason=(
            f"JPEG decode takes {share:.0%} of the workers' time at {decoded / 1e6:.2f} Mpx an image, "
            f"{decoded / out:.0f}x the pixels the pipeline keeps; decoding {gain.files} of your files both ways, "
            f"each shrunk to that size, saved {g:.0%} of the decode and shrink. Pixels change slightly (the DCT "
            "scales instead of the resize filter)"
        ),
    )


def deterministic_front(st: Stages) -> list[StageFacts]:
    """The stages every epoch repeats alike: open, decode, and the transforms before the first random one.

    A Compose with no random step at all makes the whole sample the same every epoch: the dataset's own code
    (``__getitem__``, its sampled functions) joins the front.
    """
    steps = []
    for f in st.get("transform "):
        _, position, name = f.row.stage.split(" ", 2)
        steps.append((int(position), name, f))
    steps.sort(key=lambda step: step[0])
    front = st.get("PIL open") + st.get("PIL decode ")
    for _, name, f in steps:
        if RANDOM.match(name):
            return front
        front.append(f)
    return front + (st.get(GETITEM) + st.get("code ") if steps else [])


def _cache_front(st: Stages, model: EpochModel, config: Mapping[str, Any], min_share: float) -> Suggestion | None:
    front = deterministic_front(st)
    share = sum(f.row.share for f in front)
    if share < 2 * min_share or not front:
        return None
    last = front[-1]
    floats = any(f.row.stage.endswith(FLOAT_STEPS) for f in front)
    pixels = last.pixels_out or next((f.pixels_out for f in reversed(front) if f.pixels_out), None)
    per_sample = None if pixels is None else pixels * 3 * (4 if floats else 1)
    samples = config.get("dataset_len")
    memory = f"{per_sample * samples / 2**30:.1f} GiB for {samples} samples" if per_sample and samples else None
    return _priced(
        model,
        st,
        front,
        0.95,
        0.85,
        1.0,
        parameter="cache",
        current="decoded every epoch",
        suggested="cache whole samples"
        if last.row.stage.startswith(("__", "code "))
        else (f"cache samples after {last.row.stage}"),
        reason=(
            f"the deterministic front ({', '.join(f.row.stage for f in front)}) takes {share:.0%} of the workers' "
            f"time and gives the same output every epoch; cached, it is a lookup"
            + (f" ({memory} in RAM)" if memory else "")
        ),
    )


def _uint8(st: Stages, model: EpochModel, batch_nbytes: float | None, min_share: float) -> Suggestion | None:
    steps = [f for f in st.get("transform ") if f.row.stage.endswith(FLOAT_STEPS)]
    share = sum(f.row.share for f in steps)
    if share < min_share:
        return None
    saved = (
        f"; a batch crosses as {batch_nbytes / 4 / 2**20:.1f} MiB instead of {batch_nbytes / 2**20:.1f}"
        if (batch_nbytes)
        else ""
    )
    return _priced(
        model,
        st,
        steps,
        0.8,
        0.6,
        0.95,
        parameter="uint8_to_gpu",
        current="float32 made and normalised on the CPU",
        suggested="PILToTensor (uint8) in the workers; .float().div(255) and Normalize on the GPU",
        reason=f"{', '.join(f.row.stage for f in steps)} take {share:.0%} of the workers' time{saved}",
    )


def _handover(st: Stages, model: EpochModel, batch_nbytes: float | None, min_share: float) -> Suggestion | None:
    rows = st.get(HANDOVER)
    if not rows or rows[0].row.share < min_share:
        return None
    size = f" ({batch_nbytes / 2**20:.1f} MiB a batch)" if batch_nbytes else ""
    return _priced(
        model,
        st,
        rows,
        0.75,
        0.5,
        0.9,
        parameter="handover",
        current=f"the batch pickled into shared memory{size}",
        suggested="fewer bytes a batch: uint8 instead of float32, crop before collate, or smaller batches",
        reason=f"handing each batch to the training process takes {rows[0].row.share:.0%} of the workers' time",
    )
