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
    expected_speedup: float | None  # throughput after / before; None if not modelled
    rule_of_thumb: Any = None  # the sources' static rule, shown beside the measured answer


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "summary": self.summary,
            "verdict": self.verdict,
            "symptoms": [asdict(s) for s in self.symptoms],
            "suggestions": [asdict(s) for s in self.suggestions],
            "notes": list(self.notes),
            "ranks": [dict(r) for r in self.ranks],
        }

    def code_change(self) -> str | None:
        """The suggestions as a line to paste, e.g. ``DataLoader(..., num_workers=6, pin_memory=True)``.

        In the framework's own terms when the run came from one: Hugging Face's
        ``TrainingArguments(..., dataloader_num_workers=6)``, Lightning's
        ``*_dataloader()`` hook. See collector/diagnosis/code_line.py.
        """
        return code_change(((s.parameter, s.suggested) for s in self.suggestions), self.run)
