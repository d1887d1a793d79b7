"""Diff two traces: where each rank's comm pattern diverges, and how the volume moved.

    diff_traces(a, b) -> Diff

What is compared is analyzer.compare.normalize's stream under its Options (what counts as noise).
Same world size: each rank's normalized signature stream (analyzer.compare.normalize) in A is aligned
with the same rank's in B. Ranks whose streams hash equal are done in one columnar pass; the
others are grouped by their (stream A, stream B) pair, so one Python diff (common prefix and
suffix stripped, then difflib over the middle) serves every rank of a pair, and pairs whose
diffs read the same merge into one rank class. Always: a volume table per mesh dim x op x
phase, which compares even when world sizes or layouts differ.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import polars as pl

from analyzer.compare.normalize import COMM_OPS, Options, normalize, rank_streams
from analyzer.model.trace import Trace

CONTEXT = 3
"""Signatures shown before the first divergence."""
MAX_RUNS = 50
"""Runs kept per rank class (the count of all runs is kept too)."""


@dataclass
class Run:
    kind: str
    """inserted (in B only), removed (in A only) or changed (replaced)."""
    a_start: int
    a_stop: int
    b_start: int
    b_stop: int
    """Half-open positions in the ranks' comparable streams."""
    a_sigs: list[str]
    b_sigs: list[str]
    where: dict
    """module, phase, step, frame of the run's first event (B's for inserted, A's otherwise)."""


@dataclass
class Divergence:
    ranks: list[int]
    """The rank class: every rank whose diff reads exactly like this."""
    position_a: int
    position_b: int
    """Position of the first differing event in the comparable streams of A and B."""
    idx_a: int | None
    idx_b: int | None
    """Its index in the trace's event stream of the class's first rank (None past the end)."""
    event_a: dict | None
    event_b: dict | None
    """sig, module, phase, step, frame of the first differing event on each side."""
    context: list[str]
    """The signatures just before it (equal on both sides)."""
    runs: list[Run]
    n_runs: int
    length_a: int
    length_b: int


@dataclass
class Diff:
    world_size_a: int
    world_size_b: int
    divergences: list[Divergence] = field(default_factory=list)
    only_a: list[int] = field(default_factory=list)
    only_b: list[int] = field(default_factory=list)
    """Ranks with a stream in one trace only."""
    volume: pl.DataFrame | None = None
    """dim, op, phase, calls_a, calls_b, calls_delta, bytes_a, bytes_b, bytes_delta (all ranks)."""

    @property
    def streams_compared(self) -> bool:
        return self.world_size_a == self.world_size_b

    @property
    def equal(self) -> bool:
        volume_equal = (
            self.volume is None
            or self.volume.filter((pl.col("calls_delta") != 0) | (pl.col("bytes_delta") != 0)).is_empty()
        )
        return self.streams_compared and not self.divergences and not self.only_a and not self.only_b and volume_equal


def volume_table(norm_a: pl.DataFrame, norm_b: pl.DataFrame) -> pl.DataFrame:
    """Collective/p2p calls and bytes (larger buffer side, summed over ranks) per mesh dim x op
    x phase, side by side with B - A deltas; rows present on one side only show 0 on the other."""

    def per(norm, side):
        return (
            norm.filter(pl.col("op").is_in(sorted(COMM_OPS)))
            .group_by("dim", "op", "phase")
            .agg(pl.len().cast(pl.Int64).alias(f"calls_{side}"), pl.col("bytes").sum().alias(f"bytes_{side}"))
        )

    keys = ["dim", "op", "phase"]
    table = per(norm_a, "a").join(per(norm_b, "b"), on=keys, how="full", coalesce=True)
    return (
        table.with_columns(pl.col("calls_a", "calls_b", "bytes_a", "bytes_b").fill_null(0))
        .with_columns(
            calls_delta=pl.col("calls_b") - pl.col("calls_a"), bytes_delta=pl.col("bytes_b") - pl.col("bytes_a")
        )
        .select(*keys, "calls_a", "calls_b", "calls_delta", "bytes_a", "bytes_b", "bytes_delta")
        .sort(keys)
    )


def diff_traces(a: Trace, b: Trace, options: Options | None = None) -> Diff:
    """`options`: what counts as noise (default: dim aliases on, group creation and size-1
    groups left out; Options.strict() compares everything as recorded)."""
    norm_a, norm_b = normalize(a, options), normalize(b, options)
    return diff_normalized(norm_a, norm_b, a.world_size, b.world_size, a.ranks, b.ranks)


def diff_normalized(
    norm_a: pl.DataFrame, norm_b: pl.DataFrame, world_a: int, world_b: int, ranks_a: list[int], ranks_b: list[int]
) -> Diff:
    out = Diff(world_size_a=world_a, world_size_b=world_b, volume=volume_table(norm_a, norm_b))
    if world_a != world_b:
        return out  # different layouts: only the volume table compares
    out.only_a = sorted(set(ranks_a) - set(ranks_b))
    out.only_b = sorted(set(ranks_b) - set(ranks_a))
    both = sorted(set(ranks_a) & set(ranks_b))
    streams = (
        pl.DataFrame({"rank": both}, schema={"rank": pl.Int32})
        .join(rank_streams(norm_a), on="rank", how="left")
        .join(rank_streams(norm_b), on="rank", how="left", suffix="_b")
        .with_columns(pl.col("h", "h_b").fill_null(0))
    )
    differing = (
        streams.filter(pl.col("h") != pl.col("h_b"))  # the one columnar pass
        .group_by("h", "h_b")
        .agg(pl.col("rank").sort())
        .sort(pl.col("rank").list.first())
    )
    classes: dict[tuple, Divergence] = {}
    for pair in differing.iter_rows(named=True):
        ranks = pair["rank"]
        div = _diff_rank(norm_a.filter(pl.col("rank") == ranks[0]), norm_b.filter(pl.col("rank") == ranks[0]))
        key = _diff_key(div)
        if key in classes:
            classes[key].ranks = sorted(classes[key].ranks + list(ranks))
        else:
            div.ranks = list(ranks)
            classes[key] = div
    out.divergences = sorted(classes.values(), key=lambda d: d.ranks[0])
    return out


def _diff_key(div: Divergence) -> tuple:
    """Two rank pairs whose diffs read the same (positions, runs, events) are one class."""
    return (
        div.position_a,
        div.position_b,
        div.length_a,
        div.length_b,
        tuple((r.kind, r.a_start, r.a_stop, r.b_start, r.b_stop, tuple(r.a_sigs), tuple(r.b_sigs)) for r in div.runs),
        div.n_runs,
    )


def _context(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: row[k] for k in ("sig", "module", "phase", "step", "frame")}


def _diff_rank(ra: pl.DataFrame, rb: pl.DataFrame) -> Divergence:
    """Diff one rank's two streams: prefix/suffix stripped, difflib in between."""
    sa, sb = ra.sort("pos")["sig"].to_list(), rb.sort("pos")["sig"].to_list()
    rows_a, rows_b = ra.sort("pos").to_dicts(), rb.sort("pos").to_dicts()
    runs = _runs(sa, sb, rows_a, rows_b, by_frame=False)
    if runs:  # identical signatures can align several ways: prefer the one that keeps frames paired
        framed = _runs(sa, sb, rows_a, rows_b, by_frame=True)
        if _cost(framed) <= _cost(runs):
            runs = framed
    first_a = runs[0].a_start if runs else min(len(sa), len(sb))
    first_b = runs[0].b_start if runs else min(len(sa), len(sb))
    row_a = rows_a[first_a] if first_a < len(rows_a) else None
    row_b = rows_b[first_b] if first_b < len(rows_b) else None
    return Divergence(
        ranks=[],
        position_a=first_a,
        position_b=first_b,
        idx_a=row_a["idx"] if row_a else None,
        idx_b=row_b["idx"] if row_b else None,
        event_a=_context(row_a),
        event_b=_context(row_b),
        context=sa[max(0, first_a - CONTEXT) : first_a],
        runs=runs[:MAX_RUNS],
        n_runs=len(runs),
        length_a=len(sa),
        length_b=len(sb),
    )


def _cost(runs: list[Run]) -> int:
    return sum(max(r.a_stop - r.a_start, r.b_stop - r.b_start) for r in runs)


def _runs(sa: list[str], sb: list[str], rows_a: list[dict], rows_b: list[dict], by_frame: bool) -> list[Run]:
    """Common prefix and suffix stripped, difflib over the middle. by_frame: align on signature
    + frame (so an extra all_reduce lands at its own line, not at the last of several equal
    ones), then drop the runs that differ only in frames (the code moved, the pattern did not)."""
    key_a = [f"{s}@{r['frame']}" for s, r in zip(sa, rows_a)] if by_frame else sa
    key_b = [f"{s}@{r['frame']}" for s, r in zip(sb, rows_b)] if by_frame else sb
    prefix, limit = 0, min(len(key_a), len(key_b))
    while prefix < limit and key_a[prefix] == key_b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and key_a[-1 - suffix] == key_b[-1 - suffix]:
        suffix += 1
    ids: dict[str, int] = {}  # ints hash and compare faster than long signature strings
    ia = [ids.setdefault(k, len(ids)) for k in key_a[prefix : len(key_a) - suffix]]
    ib = [ids.setdefault(k, len(ids)) for k in key_b[prefix : len(key_b) - suffix]]
    kinds = {"insert": "inserted", "delete": "removed", "replace": "changed"}
    runs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ia, ib, autojunk=False).get_opcodes():
        a0, a1, b0, b1 = prefix + i1, prefix + i2, prefix + j1, prefix + j2
        if tag == "equal" or (tag == "replace" and sa[a0:a1] == sb[b0:b1]):
            continue
        first = rows_b[b0] if tag == "insert" else rows_a[a0]
        runs.append(
            Run(
                kinds[tag],
                a0,
                a1,
                b0,
                b1,
                sa[a0:a1][:5],
                sb[b0:b1][:5],
                {k: first[k] for k in ("module", "phase", "step", "frame")},
            )
        )
    return runs
