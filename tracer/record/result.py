"""What a recording gives back (RecordResult), and how an interrupted one says what it kept."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while recording (the CLI turns SIGTERM into this); `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(message)
        self.signum = signum
        self.message = message


@dataclass(kw_only=True, slots=True)
class RecordResult:
    out: str
    """Path of the merged trace."""
    ranks: list[int]
    """Ranks recorded."""
    n_events: dict[int, int] = field(default_factory=dict)
    """Events per rank."""
    errors: dict[int, str] = field(default_factory=dict)
    """One line per rank that did not finish cleanly."""
    seconds: float = 0.0
    """Wall time of the recording."""
    compute: dict[int, str] = field(default_factory=dict)
    """"fake" or "real" per rank: how its tensor math ran."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know (e.g. ranks re-recorded with real compute), one line each."""
    peak_rss: dict[int, int] = field(default_factory=dict)
    """Peak resident memory of each recording process, bytes, by the first rank it recorded
    (its own high-water mark, measured by the process itself: executors.shared.own_peak_bytes)."""
    written: bool = False
    """Whether `out` was written (False when no rank recorded anything: the old file stays)."""
    derived: dict[int, int] = field(default_factory=dict)
    """Ranks derived by relabelling (not recorded), each with the rank it was derived from."""
