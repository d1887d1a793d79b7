"""What every check takes besides the trace, and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.model.findings import Finding


@dataclass(kw_only=True, slots=True)
class CheckOptions:
    """Options of `analyzer check` (and of the checks `hang` and `report` run)."""

    eager_bytes: int = 0
    """Blocking sends up to this many bytes complete without a posted recv (the eager protocol of
    small messages); 0: every blocking send is a rendezvous."""


@dataclass(kw_only=True, slots=True)
class Checked:
    """A check's result: its findings, and notes on what it could not verify."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def extend(self, other: Checked) -> None:
        self.findings.extend(other.findings)
        self.notes.extend(other.notes)
