"""Ranks that did not record to the end: `failed_rank` (its program raised, it was killed or
timed out, or its stream stops short) and `missing_rank` (no events at all).

A recording where some rank crashed is not a clean recording, even when what the other ranks
recorded matches: `check`, `hang` and `diff` report these so that a CI gate never passes it. The
trace knows why: each rank's end record (ok / error with the exception line / truncated), and
for ranks whose process was stopped from outside the header's `rank_status` (timed_out, killed,
exited, not_started) with the recorder's reason. One finding per distinct outcome, naming every
rank that had it (a thousand ranks killed at one timeout are one finding).

Flight Recorder dumps: a missing dump whose peers are blocked on it is reported where they wait
(checks/missing_ranks.py); this adds the missing dumps nobody was seen waiting on.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from analyzer.model.findings import Finding, Kind, RankOutcome
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace

FAILED_RANK = Kind(
    name="failed_rank",
    about="a rank whose program raised, was killed or timed out, or whose stream stops short: the recording is "
    "incomplete",
    blocks=True,
    majority=False,
)
MISSING_RANK = Kind(
    name="missing_rank",
    about="a member of a group left no stream (a dump never written, a rank not "
    "recorded) while its peers wait in a collective",
    blocks=True,
    majority=False,
)

WHY = {
    "error": "raised",
    "truncated": "left a stream that ends early (truncated file)",
    "timed_out": "timed out",
    "killed": "was killed",
    "exited": "exited early",
    "not_started": "never ran",
}


def _who(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks_text(ranks)}"


def check(trace: Trace, explained: AbstractSet[int] = frozenset()) -> list[Finding]:
    """Findings for ranks whose status is not ok and ranks with no stream, except those in
    `explained` (already the culprit of a finding that says so: where their peers wait)."""
    missing = set(trace.missing_ranks)
    outcomes: dict[tuple, list[int]] = {}
    for rank, s in sorted(trace.status.items()):
        state = s.get("status", "ok")
        if state != "ok" and rank not in missing and rank not in explained:
            outcomes.setdefault((state, s.get("error") or "", s.get("error_text")), []).append(rank)
    out = []
    for (state, error, text), ranks in outcomes.items():
        n = [trace.status[r].get("n", 0) for r in ranks]
        kept = f"{n[0]} events kept" if len(set(n)) == 1 else f"{min(n)}-{max(n)} events kept per rank"
        what = WHY.get(state, state)
        if state == "truncated":  # no end record: all that is known is where the stream stops
            many = len(ranks) > 1
            message = (
                f"{_who(ranks)}: stream{'s end' if many else ' ends'} early (truncated file; {kept}): the "
                f"recording is incomplete, and what the rank{'s' if many else ''} did after that is not recorded"
            )
        else:
            more = len(text.splitlines()) - 1 if text else 0
            rest = f"; {more} more line{'s' if more > 1 else ''} of the error in error_text (--json)" if more else ""
            message = (
                f"{_who(ranks)} {what}"
                + (f": {error}" if error else "")
                + f" ({kept}{rest}): the recording is incomplete, and what the other ranks did after that "
                "point may be its consequence"
            )
        out.append(
            Finding(
                kind=FAILED_RANK,
                ranks=ranks,
                culprit_ranks=ranks,
                expected="every rank records to the end",
                actual={r: state for r in ranks},
                outcome=RankOutcome(status=state, error=error or None, error_text=text),
                message=message,
            )
        )
    absent: dict[tuple, list[int]] = {}
    for rank in sorted(missing - set(explained)):
        s = trace.status.get(rank, {})
        absent.setdefault((s.get("status", ""), s.get("error") or ""), []).append(rank)
    dumps = "state" in trace.stream.columns
    for (state, error), ranks in absent.items():
        why = f": it {WHY.get(state, state)}" + (f" ({error})" if error else "") if state else ""
        if state == "truncated":  # a file cut before any event of theirs: no guess about the process
            first = "their first events" if len(ranks) > 1 else "its first event"
            why = f": the trace ends early (truncated file), before {first}"
        out.append(
            Finding(
                kind=MISSING_RANK,
                ranks=ranks,
                culprit_ranks=ranks,
                expected="a dump from every rank" if dumps else "events from every rank asked for",
                actual={r: "no dump" if dumps else "no events" for r in ranks},
                outcome=RankOutcome(status=state or None, error=error or None),
                message=(
                    f"{_who(ranks)} left no "
                    + ("Flight Recorder dump" if dumps else "events")
                    + why
                    + ("" if why else " (its process most likely died before recording anything: see its log)")
                ),
            )
        )
    return out
