"""Rules a rank's own collective must satisfy, whatever its peers did: all_reduce / broadcast
output = input (shape and dtype), all-gather output = input x group size (reduce-scatter the
reverse; the list forms one chunk per member), and all_to_all_single split sizes that pair up
between ranks. Run by the collectives check over the events at their majority positions."""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from analyzer.checks.common import atom_values
from analyzer.model.findings import Kind
from analyzer.model.text import frame_text, group_text, is_shapes, ranks_text, shape_text
from traceformat.format import Mode
from traceformat.ops import COLLECTIVE, GATHER_OPS, IN_PLACE_OPS, OPS, SCATTER_OPS, SPLIT_OPS, UNEVEN_OPS, names

# output = input, shape and dtype: the in-place ops, but a rooted reduce (NCCL's out-of-place
# `_reduce_oop`, in Flight Recorder dumps, writes its root's output only)
SAME_SHAPE = sorted(n for n in IN_PLACE_OPS if not (OPS[n].rooted and OPS[n].reduces))
GATHERS = sorted(GATHER_OPS - UNEVEN_OPS)
SCATTERS = sorted(SCATTER_OPS - UNEVEN_OPS)
UNEVEN = sorted(UNEVEN_OPS)
# the list forms (one tensor per member) of the even gathers / reduce-scatters
LISTS = sorted(set(names(kind=COLLECTIVE, flat=False, coalesced=False)) & set(GATHERS + SCATTERS))
SPLITS = sorted(SPLIT_OPS)
DTYPE_MISMATCH = Kind(
    name="dtype_mismatch",
    about="members of a collective passed different dtypes, or an output's dtype differs from its input's",
)
SHAPE_MISMATCH = Kind(
    name="shape_mismatch", about="members passed different shapes, or output and input sizes break the op's size rule"
)
SPLIT_MISMATCH = Kind(name="split_mismatch", about="all_to_all_single split sizes that do not pair up between ranks")


def _output_side(report, groups, pats: pl.DataFrame, positioned, atoms, members_of) -> None:
    """all_reduce / broadcast write their output in the shape and dtype of their input: an
    output that differs (FR records both sides; a dtype is 'in->out' where they differ) is a
    shape_mismatch / dtype_mismatch of that rank, whatever the other ranks did."""
    known = {aid for aid, v in atoms.items() if is_shapes(v) and v}
    same = pats.filter(pl.col("op").is_in(SAME_SHAPE))
    bad = same.filter(
        (pl.col("in_shapes") != pl.col("out_shapes"))
        & pl.col("in_shapes").is_in(sorted(known))
        & pl.col("out_shapes").is_in(sorted(known))
    )
    if not bad.is_empty():
        for row in positioned(bad).sort("group", "pos", "rank").to_dicts():
            io = f"input {shape_text(atoms.get(row['in_shapes']))} -> output {shape_text(atoms.get(row['out_shapes']))}"
            _self_finding(report, groups, members_of, row, SHAPE_MISMATCH, "output shape = input shape", io)
    dt = same.filter(pl.col("dtype").cast(pl.String).str.contains("->", literal=True))
    if not dt.is_empty():
        for row in (
            positioned(dt.drop("dtype"))
            .join(dt.select("code", "dtype"), on="code")
            .sort("group", "pos", "rank")
            .to_dicts()
        ):
            i, o = str(row["dtype"]).split("->", 1)
            io = f"input {i} -> output {o}"
            _self_finding(report, groups, members_of, row, DTYPE_MISMATCH, "output dtype = input dtype", io)


def _self_finding(
    report, groups, members_of, row: dict, kind: Kind, rule: str, actual: str, *, output_side: bool = True
) -> None:
    """One rank's collective breaks `rule`. An output-side finding (all_reduce / broadcast) also
    stands in for the cross-rank difference at its position (see PositionFindings.findings)."""
    gid = row["group"]
    size = "" if output_side else f" ({len(members_of[gid])} ranks)"

    def message(f, row=row, rule=rule):
        bad = "; ".join(f"rank {r}: {f.actual[r]}" for r in f.culprit_ranks)
        return f"{row['op']} #{f.seq} on {group_text(f.group)} breaks {rule}{size}: {bad}"

    report.add(
        kind,
        gid,
        row["pos"],
        row["rank"],
        op=row["op"],
        expected=rule,
        actual=actual,
        frame=frame_text(row),
        members=members_of[gid],
        message=message,
        detail="output side" if output_side else None,
    )


def per_row_rules(report, trace, groups, pats: pl.DataFrame, positioned, atoms, members_of) -> None:
    """Every rule a rank's own collective must satisfy, whatever the others did."""
    _output_side(report, groups, pats, positioned, atoms, members_of)
    _size_rule(report, trace, groups, pats, positioned, atoms, members_of)
    _uneven_rule(report, groups, pats, positioned, atoms, members_of)
    _splits(report, trace, groups, pats, positioned, members_of)


def _size_rule(report, trace, groups, pats: pl.DataFrame, positioned, atoms, members_of) -> None:
    """All-gathers must output group-size x their input; reduce-scatters the reverse. Judged
    per pattern; only the events of a bad pattern are looked at."""
    numel = {aid: sum(_prod(s) for s in v) for aid, v in atoms.items() if is_shapes(v)}
    count = {aid: len(v) for aid, v in atoms.items() if is_shapes(v)}
    cand = pats.filter(pl.col("op").is_in(GATHERS + SCATTERS))
    if cand.is_empty():
        return
    sizes = trace.groups.select(group="gid", size="size")
    cand = cand.join(sizes, on="group").with_columns(
        i=pl.col("in_shapes").replace_strict(numel, default=0, return_dtype=pl.Int64),
        o=pl.col("out_shapes").replace_strict(numel, default=0, return_dtype=pl.Int64),
        ni=pl.col("in_shapes").replace_strict(count, default=0, return_dtype=pl.Int64),
        no=pl.col("out_shapes").replace_strict(count, default=0, return_dtype=pl.Int64),
    )
    gathers = pl.col("op").is_in(GATHERS)
    # the list forms hold one chunk per member, chunks may differ (all_gather_v / reduce_scatter_v)
    lists = pl.col("op").is_in(LISTS)
    bad = cand.filter(
        pl.when(lists)
        .then(pl.when(gathers).then(pl.col("no")).otherwise(pl.col("ni")) != pl.col("size"))
        .when(gathers)
        .then(pl.col("o") != pl.col("i") * pl.col("size"))
        .otherwise(pl.col("i") != pl.col("o") * pl.col("size"))
    )
    if bad.is_empty():
        return
    for row in positioned(bad).sort("group", "pos", "rank").to_dicts():
        io = f"input {shape_text(atoms.get(row['in_shapes']))} -> output {shape_text(atoms.get(row['out_shapes']))}"
        rule = "output = input x group size" if row["op"] in GATHERS else "input = output x group size"
        _self_finding(report, groups, members_of, row, SHAPE_MISMATCH, rule, io, output_side=False)


def _uneven_rule(report, groups, pats: pl.DataFrame, positioned, atoms, members_of) -> None:
    """all_gather_v / reduce_scatter_v: each member contributes its own size, so the shared side
    (a gather's outputs, a reduce-scatter's inputs: one flat tensor or one chunk per member) holds
    the sum of the members' own sides. Judged per position, once every member is there and the
    shared side agrees (a shared side that differs is the cross-rank shape_mismatch already).
    Culprits: the members whose own side differs from their chunk of the shared side; all of them
    when the shared side is one flat tensor (which member is off cannot be told)."""
    cand = pats.filter(pl.col("op").is_in(UNEVEN))
    if cand.is_empty():
        return
    rows = positioned(cand).to_dicts()
    by_pos: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        by_pos[(row["group"], row["pos"])].append(row)
    for (gid, _), at in sorted(by_pos.items()):
        members = members_of[gid]
        gather = at[0]["op"] in GATHER_OPS
        own, shared = ("in_shapes", "out_shapes") if gather else ("out_shapes", "in_shapes")
        if sorted(r["rank"] for r in at) != members or len({r[shared] for r in at}) != 1:
            continue
        chunks = atoms.get(at[0][shared]) or []
        mine = {r["rank"]: sum(_prod(s) for s in (atoms.get(r[own]) or [])) for r in at}
        if len(chunks) == len(groups[gid]["ranks"]):  # one chunk per member, in group-rank order
            culprits = [r for j, r in enumerate(groups[gid]["ranks"]) if r in mine and _prod(chunks[j]) != mine[r]]
        else:
            culprits = [] if sum(_prod(s) for s in chunks) == sum(mine.values()) else members
        if not culprits:
            continue
        side = "outputs" if gather else "inputs"
        rule = f"{side} = the members' own sizes summed"
        for row in sorted(at, key=lambda r: r["rank"]):
            if row["rank"] not in culprits:
                continue
            io = f"input {shape_text(atoms.get(row['in_shapes']))} -> output {shape_text(atoms.get(row['out_shapes']))}"
            _self_finding(report, groups, members_of, row, SHAPE_MISMATCH, rule, io, output_side=False)


def _splits(report, trace, groups, pats: pl.DataFrame, positioned, members_of) -> None:
    """all_to_all_single: what rank i sends j must equal what j expects from i."""
    # splits atoms are two lists of sizes, checked at load (analyzer/model/atoms.py); -1: none recorded
    a2a = pats.filter(pl.col("op").is_in(SPLITS) & (pl.col("splits") >= 0))
    if a2a.is_empty():
        return
    a2a = positioned(a2a)
    atoms = atom_values(trace, a2a["splits"].unique().to_list())
    table = pl.DataFrame(
        {
            "splits": list(atoms),
            "send": [list(v[0]) for v in atoms.values()],
            "expect": [list(v[1]) for v in atoms.values()],
        },
        schema={"splits": pl.Int32, "send": pl.List(pl.Int64), "expect": pl.List(pl.Int64)},
    )
    members = (
        trace.groups.select(group="gid", peer="ranks")
        .explode("peer")
        .with_columns(j=pl.int_range(pl.len()).over("group"))
    )
    base = a2a.select("group", "pos", "rank", "splits", "frame", "module").join(table, on="splits")
    if trace.mode is Mode.FAKE:
        # A fake backend cannot exchange data: split sizes a rank learned from an all_to_all of
        # counts are its own counts echoed back (out == in on every rank). Such positions cannot
        # be verified in fake mode (record with --mode local); a real disagreement breaks the echo.
        echo = base.group_by("group", "pos").agg(echo=(pl.col("send") == pl.col("expect")).all())
        base = base.join(echo.filter(~pl.col("echo")).select("group", "pos"), on=["group", "pos"])

    def by_peer(own: str, sizes: str, peer: str, value: str) -> pl.DataFrame:
        """One row per (rank, j-th member): the split size this rank lists for that member."""
        return (
            base.select("group", "pos", v=sizes, **{own: "rank"})
            .explode("v")
            .with_columns(j=pl.int_range(pl.len()).over("group", "pos", own))
            .join(members, on=["group", "j"])
            .rename({"peer": peer, "v": value})
            .drop("j")
        )

    send = by_peer("src", "send", "dst", "sent")
    recv = by_peer("dst", "expect", "src", "expected")
    pairs = send.join(recv, on=["group", "pos", "src", "dst"], how="inner").filter(pl.col("sent") != pl.col("expected"))
    frames = {
        (r["group"], r["pos"], r["rank"]): frame_text(r)
        for r in base.select("group", "pos", "rank", "frame", "module").to_dicts()
    }
    for (gid, pos), bad in pairs.group_by(["group", "pos"], maintain_order=True):
        counts: dict[int, int] = defaultdict(int)
        for s, d in zip(bad["src"], bad["dst"]):
            counts[s] += 1
            if d != s:
                counts[d] += 1
        top = max(counts.values())
        culprits = sorted(r for r, c in counts.items() if c == top)
        mism = [
            f"{s}->{d}: sends {x}, expected {y}"
            for s, d, x, y in bad.select("src", "dst", "sent", "expected").iter_rows()
        ]
        group_members = members_of[gid]

        def message(f, mism=mism):
            return (
                f"all_to_all_single #{f.seq} on {group_text(f.group)}: split sizes disagree "
                f"({'; '.join(mism[:6])}{' ...' if len(mism) > 6 else ''}); culprit "
                f"rank{'s' if len(f.culprit_ranks) > 1 else ''} {ranks_text(f.culprit_ranks)}"
            )

        for r in culprits:
            report.add(
                SPLIT_MISMATCH,
                gid,
                pos,
                r,
                op="all_to_all_single",
                expected="send[i][j] == expect[j][i]",
                actual=[m for m in mism if m.startswith(f"{r}->") or m.split(":")[0].endswith(f"->{r}")],
                frame=frames.get((gid, pos, r), "?"),
                members=group_members,
                message=message,
            )


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out
