"""A DTensor redistributed away and straight back: A -> B, then B -> A on the same mesh, shape
and dtype, with nothing recorded in between (no other redistribute or collective), from the same
source line, module and phase (`x.redistribute(mesh, [Replicate()]).redistribute(mesh,
[Shard(0)])`, or a helper converting back before anything used the result). The trace holds
communication, not compute: "no compute in between" is read as "nothing recorded in between,
issued by the same line"; a round trip spread over two lines is not judged (an op on the
Replicate tensor between them would leave no mark). The pair's communication (the all-gather
of Shard -> Replicate, say) bought nothing the second redistribute kept. Fix: drop both, or keep
the tensor in the second layout for the ops that need it."""

from __future__ import annotations

import polars as pl

from analyzer.lint.common import advice, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

REDISTRIBUTE_ROUNDTRIP = Kind(
    name="redistribute_roundtrip",
    about="a DTensor redistributed away and back with nothing in between",
    severity=ADVICE,
)

COLUMNS = ("rank", "idx", "op", "info", "module", "phase", "frame", "step", "dtype", "parent", "group", "seq")


def _placements(trace: Trace, ids: list[int]) -> pl.DataFrame:
    """info atom id -> mesh, src, dst, shape as strings (few distinct atoms, decoded once)."""
    rows = []
    for aid in ids:
        info = trace.atom(aid)
        if isinstance(info, dict) and "src" in info and "dst" in info:
            rows.append(
                {
                    "info": aid,
                    "mesh": repr((info.get("mesh"), info.get("mesh_shape"))),
                    "src": repr(info.get("src")),
                    "dst": repr(info.get("dst")),
                    "shape": repr(info.get("shape")),
                }
            )
    schema = {"info": pl.Int32, "mesh": pl.String, "src": pl.String, "dst": pl.String, "shape": pl.String}
    return pl.DataFrame(rows, schema=schema)


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    out = Linted()
    e = trace.select(*COLUMNS, ops=["redistribute", *comm["op"].unique().to_list()])
    red = e.filter(pl.col("op") == "redistribute")
    if red.is_empty():
        return out
    # what a redistribute issued is its own: the rest is "in between"
    e = e.filter(pl.col("parent") < 0)
    table = _placements(trace, red["info"].unique().drop_nulls().to_list())
    e = e.join(table, on="info", how="left")
    nxt = {c: pl.col(c).shift(-1).over("rank", order_by="idx") for c in ("op", "idx", "src", "dst", "mesh", "shape")}
    same = [
        pl.col(c).shift(-1).over("rank", order_by="idx").eq_missing(pl.col(c))
        for c in ("module", "phase", "dtype", "frame")
    ]
    pairs = e.with_columns(**{f"next_{c}": x for c, x in nxt.items()}).filter(
        (pl.col("op") == "redistribute")
        & (pl.col("next_op") == "redistribute")
        & (pl.col("src") != pl.col("dst"))
        & (pl.col("next_src") == pl.col("dst"))
        & (pl.col("next_dst") == pl.col("src"))
        & (pl.col("next_mesh") == pl.col("mesh"))
        & (pl.col("next_shape") == pl.col("shape"))
        & pl.all_horizontal(same)
    )
    if pairs.is_empty():
        return out
    # the pair's communication: what either redistribute issued
    first = pairs.select("rank", "idx", "src", "dst", "module", "phase", "frame", "step", pair=pl.col("idx"))
    second = pairs.select("rank", idx=pl.col("next_idx"), pair=pl.col("idx"))
    owners = pl.concat([first.select("rank", "idx", "pair"), second])
    issued = comm.filter(pl.col("parent") >= 0).join(owners.rename({"idx": "parent"}), on=["rank", "parent"])
    issued = priced(issued.join(first.select("rank", "pair", "src", "dst"), on=["rank", "pair"]), options)
    if issued.is_empty():
        return out  # a round trip that moved nothing (a local chunk and back) costs no communication
    # the first redistribute's module and frame name the finding
    issued = issued.drop("module", "frame").join(
        first.select("rank", "pair", "module", "frame"), on=["rank", "pair"], how="left"
    )
    for r in summarize(issued, ["src", "dst", "frame", "phase"]):
        pairs_per_step = first.filter(
            (pl.col("src") == r["src"])
            & (pl.col("dst") == r["dst"])
            & pl.col("frame").cast(pl.String).eq_missing(r["frame"])
        )
        n = pairs_per_step.group_by("rank", "step").len().select(pl.col("len").max()).item()
        out.findings.append(
            advice(
                REDISTRIBUTE_ROUNDTRIP,
                trace,
                dict(r, per_step=n),
                f"a DTensor redistributed {_spell(r['src'])} -> {_spell(r['dst'])} and straight back in {r['phase']}, "
                f"{n} time{'s' if n != 1 else ''} per step per rank, {where(r)}: {r['per_step']} collectives "
                f"({r['bytes']} bytes) per step for nothing{time_text(r['seconds'])}; drop both redistributes or "
                "keep the tensor in the second layout",
            )
        )
    return out


def _spell(placements: str) -> str:
    """ "['S(0)']" -> [S(0)]."""
    return placements.replace("'", "")
