"""Digest arithmetic, torch-free (the ranks' digests are combined in the recording process that
merges real mode's parts, tracer/numerics/combine.py, as in local mode's one process)."""

from __future__ import annotations

Digest = tuple[float, float, float]
"""(sum, sum of squares, max |x|) in float64."""


def flat_ranks(grid) -> list[int]:
    return [r for g in grid for r in flat_ranks(g)] if isinstance(grid, list) else [int(grid)]


def rank_at(grid, coord: tuple) -> int:
    for c in coord:
        grid = grid[c]
    return int(grid)


def add_up(ds: list[Digest]) -> Digest:
    """The digest of the concatenation of disjoint parts."""
    return (sum(d[0] for d in ds), sum(d[1] for d in ds), max((d[2] for d in ds), default=0.0))


def ranks_dict(groups: list[list[int]], ranks: list[int], per: list[Digest]) -> dict:
    return {
        "groups": groups,
        "rank": list(ranks),
        "sum": [d[0] for d in per],
        "sumsq": [d[1] for d in per],
        "amax": [d[2] for d in per],
    }
