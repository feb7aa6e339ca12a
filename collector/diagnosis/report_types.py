"""The types a diagnosis returns: the Report, its symptoms with evidence and suggestions with expected speed-up."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from collector.diagnosis.code_line import code_change

Verdict = Literal["input-bound", "partly-input-bound", "not-input-bound", "insufficient-data"]
Severity = Literal["low", "medium", "high"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)


@dataclass(frozen=True)
class Symptom:
    """One named problem, with the numbers that show it."""

    id: str  # stable id, e.g. "input_bound"; see docs/report.md
    severity: Severity
    evidence: str  # one sentence with the numbers, for people
    confidence: float  # 0..1
    metrics: dict[str, Any] = field(default_factory=dict)  # the numbers behind the evidence
    borderline: bool = False  # its measured range straddles its threshold: NOTE [ Stable answers ]


@dataclass(frozen=True)
class Suggestion:
    """A concrete DataLoader setting to change, and what it should buy."""

    parameter: str  # "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", ...
    current: Any
    suggested: Any
    reason: str
    expected_speedup: float | None  # this change alone: epoch time before / after; None if not modelled
    rule_of_thumb: Any = None  # the sources' static rule, shown beside the measured answer
    expected_speedup_range: tuple[float, float] | None = None  # NOTE [ Honest ranges ]; None if not modelled


@dataclass(frozen=True)
class Alternative:
    """A setting the recommendation was chosen over, with its own predicted speed-up."""

    changes: dict[str, Any]  # parameter -> value, e.g. {"num_workers": 3, "torch.set_num_threads": 1}
    expected_speedup: float  # epoch time before / after
    expected_speedup_range: tuple[float, float]


@dataclass(frozen=True)
class Recommendation:
    """The one combined setting to paste, and the speed-up of that whole combination.

    ``changes`` is exactly what ``Report.code_change()`` writes, so the line and the speed-up describe
    the same change; the ``unpriced`` among them (a shuffle) the speed-up counts as none. ``uncertain``
    when the range includes no gain at all: only a try can tell.
    """

    changes: dict[str, Any]
    expected_speedup: float  # epoch time before / after, for the whole combination
    expected_speedup_range: tuple[float, float]
    uncertain: bool
    alternatives: tuple[Alternative, ...] = ()
    unpriced: tuple[str, ...] = ()  # changes in the line the model cannot price (shuffle): counted as none


PIPELINE_PARAMETERS = ("decode_size", "cache", "uint8_to_gpu", "handover")  # advice inside the pipeline


@dataclass(frozen=True)
class StageRow:
    """One stage over every worker: the report's ``stages`` entries (names are the JSON contract)."""

    stage: str
    calls: int
    ms_per_sample: float  # its own wall time a sample, in milliseconds
    share: float  # of the workers' fetch wall time, 0..1 (the hand-over runs beside it)
    cpu_share: float | None  # of its own time, the part on a CPU (the rest blocked: storage, locks, sleeps)


@dataclass(frozen=True)
class Report:
    """The diagnosis of one run; ``to_dict`` is the documented JSON contract."""

    run: dict[str, Any]
    summary: dict[str, Any]
    verdict: Verdict
    symptoms: tuple[Symptom, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    notes: tuple[str, ...] = ()  # things worth saying that are not symptoms
    ranks: tuple[dict[str, Any], ...] = ()  # a distributed job's ranks, one summary each (collector.diagnosis.job)
    recommendation: Recommendation | None = None
    tuning: tuple[dict[str, Any], ...] = ()  # a tuned run's trials (collector/diagnosis/tuned.py)
    tuned: str | None = None  # the line a tuned run ended with: what the tuner kept, measured
    stages: tuple[StageRow, ...] = ()  # where the workers' fetch time goes (collector/diagnosis/stages.py)
    loaders: tuple[dict[str, Any], ...] = ()  # a program's loaders, costliest first (collector.diagnosis.loaders)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract, in plain Python values (a numpy bool would print as the string "False")."""
        return _plain(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "summary": self.summary,
            "verdict": self.verdict,
            "symptoms": [asdict(s) for s in self.symptoms],
            "suggestions": [asdict(s) for s in self.suggestions],
            "notes": list(self.notes),
            "ranks": [dict(r) for r in self.ranks],
            "recommendation": None
            if self.recommendation is None
            else {**asdict(self.recommendation), "code_change": self.code_change()},
            "tuning": [dict(t) for t in self.tuning],
            "tuned": self.tuned,
            "stages": [asdict(s) for s in self.stages],
            "loaders": [dict(x) for x in self.loaders],
        }

    def code_change(self) -> str | None:
        """The suggestions as a line to paste, e.g. ``DataLoader(..., num_workers=6, pin_memory=True)``.

        In the framework's own terms when the run came from one: Hugging Face's
        ``TrainingArguments(..., dataloader_num_workers=6)``, Lightning's
        ``*_dataloader()`` hook. See collector/diagnosis/code_line.py.
        """
        return code_change(self._changes(), self.run)

    def _changes(self) -> list[tuple[str, Any]]:
        """The recommendation's changes where there is one (the speed-up is theirs), else every suggestion's."""
        if self.recommendation is not None:
            return list(self.recommendation.changes.items())
        return [(s.parameter, s.suggested) for s in self.suggestions]


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars made Python numbers and tuples made lists, all the way down."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value
