"""A decode replayed both ways in a helper process: a few of the user's own images, full size and with PIL's draft."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import dataclass

# NOTE [ Replayed decode ]
# What a JPEG decode at reduced size saves depends on the images (a noisy
# one spends its time in entropy decoding, which draft() does not shrink;
# a smooth photo in the inverse DCT, which it does), so the advice measures
# it: a helper process (never the training process, never a worker) decodes
# the files the workers named (rows "file <path>", NOTE [ Stage hooks ])
# full size and with ``draft("RGB", size)`` at the pipeline's output size,
# each then resized to that size (what the pipeline does next, now from a
# smaller image), interleaved, best of ROUNDS each, and reports both times. The pixels of a
# drafted decode differ slightly from a full decode resized (the DCT scales
# instead of the resampling filter), which the advice says. No file, no PIL,
# or a helper that fails or runs past TIMEOUT_S: no measurement, and the
# advice is not given.

ROUNDS = 3
TIMEOUT_S = 20.0

_SCRIPT = r"""
import json, sys, time
from PIL import Image
paths, side = json.loads(sys.argv[1]), int(sys.argv[2])
full = draft = 0.0
done = 0
for path in paths:
    try:
        best = [float("inf"), float("inf")]
        for _ in range(int(sys.argv[3])):
            for which in (0, 1):
                t = time.process_time()
                with Image.open(path) as im:
                    if which:
                        im.draft("RGB", (side, side))
                    im.convert("RGB").resize((side, side))
                best[which] = min(best[which], time.process_time() - t)
        full += best[0]
        draft += best[1]
        done += 1
    except Exception:
        continue
print(json.dumps({"full_s": full, "draft_s": draft, "files": done}))
"""


@dataclass(frozen=True)
class DraftGain:
    """Replayed decode-and-shrink times, summed over the files: full size and drafted."""

    full_s: float
    draft_s: float
    files: int

    @property
    def saving(self) -> float:
        """The share of a decode and its shrink the draft saves, 0..1."""
        return max(0.0, 1.0 - self.draft_s / self.full_s) if self.full_s > 0 else 0.0


@functools.lru_cache(maxsize=32)
def replay_draft(paths: tuple[str, ...], side: int) -> DraftGain | None:
    """Decode ``paths`` full size and drafted to ``side`` pixels a side, in a helper process (NOTE [ Replayed decode ])."""
    if not paths or side <= 0:
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, json.dumps(list(paths)), str(int(side)), str(ROUNDS)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        out = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not isinstance(out, dict) or not out.get("files"):
        return None
    return DraftGain(float(out["full_s"]), float(out["draft_s"]), int(out["files"]))
