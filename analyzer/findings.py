"""Findings: what a check reports. The JSON shape is a contract (see shared design):
`kind`, `severity`, `message`, `ranks`, `culprit_ranks`, `group`, `seq` at least.

Each finding kind is declared once, by the module that emits it (`kind(...)` at its top: the
checks in analyzer/checks/, `stalled_rank` in analyzer/hang.py), with the properties renderers
read (severity, whether it blocks, whether "expected" means something); renderers never test
kind names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceformat.ranks import ranks_text  # noqa: F401  (culprits are printed with it everywhere)

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """One kind of finding and how it is treated."""

    name: str
    """The `kind` of its findings (part of the JSON contract)."""
    about: str
    """What it means, one line (README / --help material)."""
    severity: str = ERROR
    """ERROR or WARNING."""
    blocks: bool = False
    """After it some rank may wait forever (a skipped collective, an unmatched p2p, a deadlock
    cycle, a missing or stalled rank): `analyzer report` then runs the hang analysis."""
    majority: bool = True
    """Its `expected` is what the majority did (shown as such); False where `expected` is a
    description, not a majority (a skipped collective, a group-creation mismatch)."""


KINDS: dict[str, Kind] = {}
"""Every declared kind by name (filled as the emitting modules are imported; see `kind_of`)."""


def kind(name: str, about: str, **properties) -> str:
    """Declare a finding kind (once, in the module that emits it); returns its name."""
    if name in KINDS:
        raise ValueError(f"finding kind {name!r} declared twice")
    KINDS[name] = Kind(name=name, about=about, **properties)
    return name


def kind_of(name: str) -> Kind:
    """The declared Kind of `name` (importing the emitters on first use)."""
    if name not in KINDS:
        import analyzer.checks  # noqa: F401  (declares the checks' kinds)
        import analyzer.hang  # noqa: F401  (declares stalled_rank)
    return KINDS[name]


@dataclass
class Finding:
    kind: str
    message: str
    ranks: list[int]
    """Every rank involved (e.g. all members of the group)."""
    culprit_ranks: list[int]
    """The ranks that deviate from the majority (both sides where there is no majority)."""
    group: dict | None = None
    """{"name", "label", "ranks"} of the process group, where one applies."""
    seq: int | None = None
    """Per-group sequence number (of the majority's stream) where it applies."""
    severity: str = ""
    """ERROR or WARNING; default: its kind's."""
    op: str | None = None
    expected: Any = None
    """What the majority did (a short description or value)."""
    actual: dict[int, Any] = field(default_factory=dict)
    """What each culprit did instead."""
    frames: dict[int, str] = field(default_factory=dict)
    """User frame (and module) of each culprit's event, and of the majority under key -1."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.severity:
            self.severity = kind_of(self.kind).severity

    @property
    def info(self) -> Kind:
        """The properties of this finding's kind."""
        return kind_of(self.kind)

    def to_json(self) -> dict:
        out = {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "ranks": sorted(self.ranks),
            "culprit_ranks": sorted(self.culprit_ranks),
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "expected": self.expected,
            "actual": {str(k): v for k, v in self.actual.items()},
            "frames": {str(k): v for k, v in self.frames.items()},
        }
        out.update(self.extra)
        return out


def group_text(group: dict | None) -> str:
    if not group:
        return "-"
    return f"{group['label']} (ranks {ranks_text(group['ranks'])})"
