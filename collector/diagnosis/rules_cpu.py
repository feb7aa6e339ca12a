"""Rules read from the scheduler's side: threads that wait for a core (contention), and one core pegged."""

from __future__ import annotations

import numpy as np

from collector.diagnosis.choose import candidates, choose
from collector.diagnosis.data import RunData
from collector.diagnosis.model import EpochModel
from collector.diagnosis.report_types import Severity, Symptom
from collector.diagnosis.stats import Facts
from collector.diagnosis.units import ms


def cpu_contention(
    facts: Facts,
    shared: EpochModel | None,
    *,
    share: float = 0.25,
    high: float = 0.5,
    min_stall: float = 0.05,
    min_step_stretch: float = 0.25,
) -> Symptom | None:
    """Producing a batch, or the step, spends much of its time runnable but waiting for a core.

        core 0  w0 step w1 w0 step w1     2 workers and the step's 2 threads on 2 cores:
        core 1  step w1 w0 step w1 w0     each waits its turn; wall time is not I/O

    Fires when the wait for a core (Linux schedstat run-queue time) is at
    least ``share`` (25%) of producing a batch while the loop stalls
    ``min_stall`` (5%), or the step's threads' waits (per intra-op thread)
    reach ``min_step_stretch`` (25%) of its wall time. Names who competes (the workers,
    the step's intra-op threads, other processes) and the cure the model
    measured (fewer workers, ``torch.set_num_threads``, or cheaper
    transforms); never more workers or caching.
    """
    if facts.load_wall_s is None or facts.load_runq_s is None:
        return None
    load_share = facts.load_runq_s / max(facts.load_wall_s, 1e-12)
    step_runnable = facts.step_cpu_s + (facts.step_runq_s or 0.0)
    step_share = (facts.step_runq_s or 0.0) / max(step_runnable, 1e-12)
    # the step's wall time stretched by its threads' waits (a step that mostly waits on a GPU or a sleep is not)
    stretched = (facts.step_runq_s or 0.0) / max(1, facts.torch_threads or 1) / max(facts.step_mean_s, 1e-12)
    loading = load_share >= share and facts.steady_stall_fraction >= min_stall
    stepping = stretched >= min_step_stretch and facts.step_runq_s is not None
    if not (loading or stepping):
        return None
    who = [f"{facts.num_workers} worker(s)" if facts.num_workers else "loading in the main process"]
    if facts.torch_threads:
        who.append(f"the step's {facts.torch_threads} intra-op thread(s)")
    if facts.background_cores >= 0.25:
        who.append(f"other processes ({facts.background_cores:.1f} cores)")
    severity: Severity = "high" if max(load_share, step_share) >= high else "medium"
    return Symptom(
        id="cpu_contention",
        severity=severity,
        evidence=(
            f"threads wait for a core: producing a batch takes {ms(facts.load_wall_s)}, of which "
            f"{ms(facts.load_runq_s)} ({load_share:.0%}) waiting for a core, {ms(facts.load_cpu_s)} CPU and "
            f"{ms(facts.load_blocked_s)} blocked; the step's threads wait {ms(facts.step_runq_s)} a batch "
            f"({step_share:.0%} of their runnable time); {', '.join(who)} share {facts.usable_cores} cores. "
            f"Cure: {_cure(facts, shared)}"
        ),
        confidence=0.9 if facts.accounting_exact else 0.7,
        metrics={
            "load_runq_share": round(load_share, 3),
            "step_runq_share": round(step_share, 3),
            "step_stretch": round(stretched, 3),
            "background_cores": round(facts.background_cores, 3),
            "torch_threads": facts.torch_threads,
        },
    )


def _cure(facts: Facts, shared: EpochModel | None) -> str:
    """What the model measured would pay against the contention (never more workers, never caching)."""
    if shared is None:
        return "fewer workers or fewer intra-op threads (torch.set_num_threads), or cheaper transforms"
    chosen, _ = choose(shared, candidates(shared))
    n, threads, gain = chosen.setting.num_workers, chosen.setting.threads, chosen.speedup
    parts = []
    if n < facts.num_workers:
        parts.append(f"num_workers={n}")
    if threads < shared.recorded.threads:
        parts.append(f"torch.set_num_threads({threads})")
    if parts and gain >= 1.05:
        return f"{' and '.join(parts)} ({gain:.2f}x by the model; see suggestions)"
    if shared.busy():
        return "none in the loader's settings: all cores are busy; cheaper transforms, or fewer other processes"
    return "cheaper transforms (decode smaller images, fewer augmentations); no thread or worker count pays"


def busiest_core(data: RunData) -> tuple[float, float] | None:
    """(busiest core's median %, the other cores' mean %) over the host samples, or None without per-core data."""
    host = data.host
    if host.empty or not host["per_core_pct"].map(len).gt(1).any():
        return None
    rows = [c for c in host["per_core_pct"] if len(c) > 1][1:]  # the first reading covers the time before the run
    if not rows:
        return None
    per_core = np.sort(np.array(rows, dtype=float), axis=1)
    return float(np.median(per_core[:, -1])), float(per_core[:, :-1].mean())
