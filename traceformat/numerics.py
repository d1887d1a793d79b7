"""The numerics record (format v2.1): digests of tensor values per step, recorded by
`tracer record --mode local --numerics`. Torch-free; with format.py and reader.py the only code
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
