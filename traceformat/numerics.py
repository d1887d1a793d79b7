"""The numerics record (format v2.1): digests of tensor values per step, recorded by
`tracer record --mode local|real --numerics`. Torch-free; with format.py and reader.py the only code
that knows the bytes (docs/trace-format.md, "Numerics").

One record per step and recording process, written after the step's events:

    {"t": "numerics", "step": s, "c": {column: [one value per digest]}}

Digests are in execution order within the step. Each digest describes one value: a module's
forward output, the gradient of its inputs, the loss, a parameter's gradient, the global
gradient norm, a parameter after the optimizer step. `sum`, `sumsq` and `amax` are of the
GLOBAL value (every rank's shard combined as its placements say), `ranks` (where the value is
declared replicated) holds each rank's own digest of its local value and the groups of ranks
that must agree.
"""

from __future__ import annotations

from typing import Any

RECORD = "numerics"
"""The record's `t`."""

FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("phase", str),  # forward / backward / optimizer
    ("what", str),  # output / grad_input / loss / grad / grad_norm / param
    ("name", str),  # module or parameter FQN ("" for loss / grad_norm)
    ("dtype", str),  # float32, bfloat16, ...
    ("shape", (list, type(None))),  # global shape where known
    ("numel", int),  # elements of the global value
    ("sum", (float, int)),
    ("sumsq", (float, int)),
    ("amax", (float, int)),
    ("layout", str),  # how the global value was made: "R", "S(0)", "P(sum)", "plain", ...
    ("ranks", (dict, type(None))),  # {"groups": [[rank, ...], ...], "sum": [...], "sumsq": [...], "amax": [...]}
)
FIELD_NAMES = tuple(name for name, _ in FIELDS)
WHATS = ("output", "grad_input", "loss", "grad", "grad_norm", "param")
PHASES = ("forward", "backward", "optimizer")


class NumericsError(ValueError):
    """A numerics record that is not one (the reader turns it into a corrupt-record error)."""


def record(step: int, columns: dict[str, list]) -> dict:
    """The record of one step's digests (columns: FIELD_NAMES, equal lengths)."""
    return {"t": RECORD, "step": int(step), "c": {name: list(columns[name]) for name in FIELD_NAMES}}


def decode(rec: dict) -> dict[str, Any]:
    """A record checked: {"step": s, "c": columns}; NumericsError when malformed. Unknown
    columns (a newer writer's) are dropped."""
    step, cols = rec.get("step"), rec.get("c")
    if type(step) is not int or step < 0 or not isinstance(cols, dict):
        raise NumericsError("numerics record without a step or columns")
    n = None
    out: dict[str, list] = {}
    for name, types in FIELDS:
        col = cols.get(name)
        if not isinstance(col, list):
            raise NumericsError(f"numerics record without column {name}")
        if n is None:
            n = len(col)
        elif len(col) != n:
            raise NumericsError(f"numerics column {name} of wrong length")
        if not all(isinstance(v, types) for v in col):
            raise NumericsError(f"numerics column {name} holds a wrong type")
        out[name] = col
    for per_rank in out["ranks"]:
        if per_rank is not None and not _per_rank_ok(per_rank):
            raise NumericsError("numerics per-rank digests malformed")
    return {"step": step, "c": out}


def _per_rank_ok(d: dict) -> bool:
    groups = d.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, list) and all(type(r) is int for r in g) for g in groups):
        return False
    k = len(d.get("rank", []))
    return all(isinstance(d.get(key), list) and len(d[key]) == k for key in ("rank", "sum", "sumsq", "amax"))


# ---- real mode: each rank process's own digests, combined into numerics records at merge ----
RANK_RECORD = "numerics_rank"
"""The `t` of one rank's own digests of one step (real mode: every rank process knows only its
own shard). `tracer record` combines them into numerics records when it merges the parts
(tracer/numerics/combine.py); a merged trace holds none. Readers older than this skip them."""

RANK_FIELDS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    *(f for f in FIELDS if f[0] != "ranks"),  # sum / sumsq / amax of this rank's local value
    ("part_of", bool),  # an activation (distinct values are parts of the global one), else a parameter's
    ("mesh", (list, type(None))),  # a sharded value: its mesh's global ranks as nested lists
    ("placements", (list, type(None))),  # per mesh dim: "S(d)", "R", "P(op)"
    ("raw", (bytes, type(None))),  # a Partial value: its local elements, float64 little-endian
    ("chunk", int),  # a pipeline stage's microbatch the value is of (its parts make the batch's), or -1
)
"""Columns of a rank record; `what` also takes "init" (a plain parameter at the first forward:
whether its ranks start equal, i.e. are replicas)."""

UNMAPPED_LAYOUT = "unmapped: "
"""A layout that starts so (then the reason): how the value maps onto the global one is not
known; it is listed, never compared (rank and numerics records alike)."""
RANK_FIELD_NAMES = tuple(name for name, _ in RANK_FIELDS)


def rank_record(step: int, rank: int, columns: dict[str, list]) -> dict:
    """One rank's digests of one step (columns: RANK_FIELD_NAMES, equal lengths)."""
    return {
        "t": RANK_RECORD,
        "step": int(step),
        "rank": int(rank),
        "c": {n: list(columns[n]) for n in RANK_FIELD_NAMES},
    }


def decode_rank(rec: dict) -> dict[str, Any]:
    """A rank record checked: {"step", "rank", "c"}; NumericsError when malformed."""
    step, rank, cols = rec.get("step"), rec.get("rank"), rec.get("c")
    if type(step) is not int or step < 0 or type(rank) is not int or rank < 0 or not isinstance(cols, dict):
        raise NumericsError("rank numerics record without a step, rank or columns")
    lengths = set()
    out: dict[str, list] = {}
    for name, types in RANK_FIELDS:
        col = cols.get(name)
        if not isinstance(col, list) or not all(isinstance(v, types) for v in col):
            raise NumericsError(f"rank numerics column {name} missing or of a wrong type")
        lengths.add(len(col))
        out[name] = col
    if len(lengths) > 1:
        raise NumericsError("rank numerics columns of unequal length")
    return {"step": step, "rank": rank, "c": out}
