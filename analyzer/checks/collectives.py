"""Collectives matched per (group, position): op, shape, dtype, reduce op, root, a2a splits, and
collectives that a rank skipped or added -- without cascades.

How: each collective gets a token (op, dtype, reduce op, root, the shape every member must agree
on, user frame). Ranks whose token sequence on a group equals the majority's are aligned as they
are (columnar: one group-by). Only the deviating ranks are aligned to the majority's sequence
with a diff (common prefix/suffix, then difflib): a deleted run is one `missing_collective`, an
inserted run one more, a replaced pair is compared field by field. Positions mapped this way feed
the columnar per-row checks (all-gather output = input x group size, ...) and the all_to_all
split matrix. Culprits are the ranks that differ from the majority; without a strict majority
(e.g. two members), all of them, unless the ties of other groups single some out
(tie_culprits.py): then the group is aligned again against a cleared member.
"""

from __future__ import annotations

import difflib

import polars as pl

from analyzer.checks.common import atom_values, conflicting_gids, group_table, majority
from analyzer.checks.options import Checked, CheckOptions
from analyzer.checks.position_findings import PositionFindings
from analyzer.checks.shape_rules import DTYPE_MISMATCH, SHAPE_MISMATCH, SPLIT_MISMATCH, per_row_rules
from analyzer.checks.tie_culprits import tie_culprits
from analyzer.model.findings import Finding, Kind
from analyzer.model.text import frame_text, group_text, ranks_text, shape_text
from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import post_mortem
from traceformat.ops import COLLECTIVE, COLLECTIVE_OPS, ROOTED_OPS, names

# the shapes every member must agree on (the op table's `agree`): a list all_gather's outputs
# (every rank's chunk, which may differ by rank: all_gather_v) and a list reduce_scatter's inputs,
# the tensor forms' one side
KEY_IN = list(names(kind=COLLECTIVE, agree="in"))
KEY_OUT = list(names(kind=COLLECTIVE, agree="out"))
ROOTED = sorted(ROOTED_OPS)
OP_MISMATCH = Kind(name="op_mismatch", about="members of a group issued different collectives at the same position")
REDUCE_OP_MISMATCH = Kind(name="reduce_op_mismatch", about="members of a reduction passed different reduce ops")
ROOT_MISMATCH = Kind(name="root_mismatch", about="members of a rooted collective named different roots")
MISSING_COLLECTIVE = Kind(
    name="missing_collective",
    about="a rank skipped (or added) a collective its group issues",
    blocks=True,
    majority=False,
)
FIELDS = (
    ("op", OP_MISMATCH),
    ("dtype", DTYPE_MISMATCH),
    ("reduce_op", REDUCE_OP_MISMATCH),
    ("root", ROOT_MISMATCH),
    ("key", SHAPE_MISMATCH),
)


def collective_patterns(trace: Trace) -> pl.DataFrame:
    """Collective patterns with their token (op, dtype, reduce op, root, the shape every member
    must agree on, user frame): computed once per pattern, not per event."""
    skip = conflicting_gids(trace)
    return (
        trace.patterns.with_columns(op=pl.col("op").cast(pl.String))
        .filter(
            pl.col("op").is_in(sorted(COLLECTIVE_OPS)) & (pl.col("group") >= 0) & ~pl.col("group").is_in(sorted(skip))
        )
        .select(
            "code", "group", "op", "dtype", "reduce_op", "peer", "in_shapes", "out_shapes", "splits", "frame", "module"
        )
        .with_columns(
            key=pl.when(pl.col("op").is_in(KEY_IN))
            .then("in_shapes")
            .when(pl.col("op").is_in(KEY_OUT))
            .then("out_shapes")
            .otherwise(-2),
            root=pl.when(pl.col("op").is_in(ROOTED)).then("peer").otherwise(-2),
        )
        .with_columns(tok=pl.struct("op", "dtype", "reduce_op", "root", "key", "frame").hash())
    )


def collective_rows(trace: Trace, pats: pl.DataFrame) -> pl.DataFrame:
    """One lean row per collective event: rank, idx, seq, code, group, tok (stream order)."""
    rows = trace.with_codes(trace.stream.select("rank", "idx", "seq", "code"), pats)
    return trace.with_patterns(rows, "group", "tok", table=pats)


def _full(trace: Trace, rows: pl.DataFrame, pats: pl.DataFrame) -> pl.DataFrame:
    """A few rows with every pattern field (for the ranks being diffed), sorted by seq."""
    return trace.with_patterns(
        rows,
        "op",
        "dtype",
        "reduce_op",
        "peer",
        "in_shapes",
        "out_shapes",
        "splits",
        "frame",
        "module",
        "key",
        "root",
        table=pats,
    ).sort("seq")


def check(trace: Trace, options: CheckOptions) -> Checked:
    return Checked(findings=_findings(trace))


def _findings(trace: Trace) -> list[Finding]:
    groups = group_table(trace)
    pats = collective_patterns(trace)
    if pats.is_empty():
        return []
    rows = collective_rows(trace, pats)
    present = set(trace.ranks)
    # gid -> its members that are present, once per group (a rule broken on each rank of a
    # 12,500-rank group is 12,500 findings: a rescan of the group for each was quadratic)
    members_of = {gid: [r for r in g["ranks"] if r in present] for gid, g in groups.items()}
    report = PositionFindings(groups)
    atoms = atom_values(
        trace,
        set(pats["key"].unique().to_list())
        | set(pats["in_shapes"].unique().to_list())
        | set(pats["out_shapes"].unique().to_list()),
    )
    # signature of a (group, rank) stream: count and an order-free sum of token xor hash(seq)
    # (a fifth of the cost of a struct hash at 82 M rows)
    mix = pl.col("tok") ^ pl.col("seq").hash(seed=7)
    per = rows.group_by("group", "rank").agg(n=pl.len(), h=mix.sum())
    sig = {(g, r): (n, h) for g, r, n, h in per.iter_rows()}
    # gid -> (member, deviating rank) pairs and their rows at the majority's positions
    deviating: dict[int, list[tuple[int, int]]] = {}
    mapped: dict[int, list[pl.DataFrame]] = {}
    votes_of: dict[int, dict[int, tuple]] = {}
    contested: dict[int, list[int]] = {}  # gid -> members, for groups without a strict majority

    def align_group(gid: int, members: list[int], rep: int, deviants: list[int], tie: bool) -> None:
        """Diff each deviating member against `rep`; a tie names every member as culprit."""
        grows = rows.filter(pl.col("group") == gid)
        rep_rows = _full(trace, grows.filter(pl.col("rank") == rep), pats).to_dicts()
        deviating[gid], mapped[gid] = [], []
        for r in deviants:
            if r == rep:
                continue
            deviating[gid].append((gid, r))
            dev = _full(trace, grows.filter(pl.col("rank") == r), pats)
            culprits = members if tie else [r]
            pairs = _align(report, gid, members, culprits, (rep, r), rep_rows, dev.to_dicts(), trace, atoms)
            if pairs:
                pos = pl.DataFrame(
                    {"seq": [s for s, _ in pairs], "pos": [p for _, p in pairs]},
                    schema={"seq": pl.Int64, "pos": pl.Int64},
                )
                mapped[gid].append(dev.select("rank", "idx", "seq", "code", "group").join(pos, on="seq"))

    for gid in sorted(per["group"].unique().to_list()):
        members = members_of[gid]
        if not members:  # only non-members issued on it (a corrupt trace): nobody to compare
            continue
        votes = votes_of[gid] = {r: sig.get((gid, r), (0, 0)) for r in members}
        value, deviants = majority(votes)
        if not deviants:
            continue
        tie = len(deviants) == len(members)
        if tie:
            contested[gid] = members
        align_group(gid, members, min(r for r, v in votes.items() if v == value), deviants, tie)
    # ties decided across groups (tie_culprits.py): aligned again against a cleared member, so
    # that a skip is said as the culprit's skip (not as the cleared member's extra)
    for gid, (culprits, by) in tie_culprits(report.ties(contested)).items():
        votes = votes_of[gid]
        rep = min(r for r in contested[gid] if r not in culprits)
        deviants = [r for r in contested[gid] if votes[r] != votes[rep]]
        if not set(culprits) <= set(deviants):
            continue
        report.drop_group(gid)
        align_group(gid, contested[gid], rep, deviants, False)
        report.note(gid, _decided(culprits, by, groups))
    dev_keys = pl.DataFrame(
        [p for ps in deviating.values() for p in ps], schema={"group": pl.Int32, "rank": pl.Int32}, orient="row"
    )

    def positioned(table: pl.DataFrame) -> pl.DataFrame:
        """The events of some patterns at their majority position (own seq unless deviating)."""
        sub = trace.with_codes(rows, table).drop("tok")
        plain = sub.join(dev_keys, on=["group", "rank"], how="anti").with_columns(pos=pl.col("seq"))
        moved = [trace.with_codes(m, table) for ms in mapped.values() for m in ms]
        return trace.with_patterns(
            pl.concat([plain] + moved, how="diagonal"),
            "op",
            "in_shapes",
            "out_shapes",
            "splits",
            "frame",
            "module",
            table=pats,
        )

    per_row_rules(report, trace, groups, pats, positioned, atoms, members_of)
    # an all_to_all pair that disagrees in a 2-rank group names both: the pairs of other groups decide
    report.narrow_ties(SPLIT_MISMATCH, tie_culprits, lambda culprits, gids: _decided(culprits, gids, groups))
    return report.findings()


def _decided(culprits: list[int], gids: list[int], groups: dict) -> str:
    """The note on a finding whose culprits the ties across groups decided."""
    who = f"rank{'s' if len(culprits) > 1 else ''} {ranks_text(culprits)}"
    return (
        f" (no majority in this group; {who}, named by every tie of its kind across groups "
        f"{', '.join(group_text(groups[g]) for g in gids)}, singled out)"
    )


def _align(
    report: PositionFindings, gid: int, members, culprits, ranks: tuple[int, int], rep_rows, dev_rows, trace, atoms
) -> list[tuple[int, int]]:
    """Diff a deviating rank against the majority's representative (`ranks` = (representative,
    deviating rank)); report skips, extras and replaced pairs. Either stream may be empty.
    Returns the (own seq, majority position) pairs that matched."""
    rep, rank = ranks
    a = [x["tok"] for x in rep_rows]
    b = [x["tok"] for x in dev_rows]
    pairs: list[tuple[int, int]] = []
    short = rank if len(b) < len(a) else rep
    ended = trace.status.get(short, {}).get("status", "ok") != "ok"
    if len(culprits) > 1 and (post_mortem(trace) or ended) and a[: len(b)] == b[: len(a)] and len(a) != len(b):
        # a stopped run (FR dumps, or a stream that ends early) without a majority: where one
        # stream is the other's prefix, the rank that stopped early is the one the others wait
        # on (hang says the same), not every member
        long_rows, short_rows = (rep_rows, dev_rows) if short == rank else (dev_rows, rep_rows)
        pairs.extend((dev_rows[k]["seq"], rep_rows[k]["seq"]) for k in range(min(len(a), len(b))))
        _missing(report, gid, members, [short], long_rows[len(short_rows) :], short, short_rows, len(short_rows), trace)
        return pairs
    for tag, i1, i2, j1, j2 in _opcodes(a, b):
        if tag == "equal":
            pairs.extend((dev_rows[j1 + k]["seq"], rep_rows[i1 + k]["seq"]) for k in range(i2 - i1))
            continue
        n = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(n):  # replaced one for one: compare fields
            pairs.append((dev_rows[j1 + k]["seq"], rep_rows[i1 + k]["seq"]))
            _compare(report, gid, members, culprits, rep_rows[i1 + k], dev_rows[j1 + k], atoms)
        if i2 - i1 > n:  # the majority has collectives this rank never issued
            _missing(report, gid, members, culprits, rep_rows[i1 + n : i2], rank, dev_rows, j1 + n, trace)
        if j2 - j1 > n:  # this rank issued collectives the majority never did
            _extra(report, gid, members, culprits, dev_rows[j1 + n : j2], rep_rows, i1 + n)
    return pairs


def _opcodes(a: list, b: list):
    """difflib opcodes, with the common prefix and suffix matched first (long repetitive streams
    with one deviation stay linear)."""
    p = 0
    while p < len(a) and p < len(b) and a[p] == b[p]:
        p += 1
    s = 0
    while s < len(a) - p and s < len(b) - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    if p:
        yield "equal", 0, p, 0, p
    if p < len(a) - s or p < len(b) - s:
        sm = difflib.SequenceMatcher(None, a[p : len(a) - s], b[p : len(b) - s], autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            yield tag, i1 + p, i2 + p, j1 + p, j2 + p
    if s:
        yield "equal", len(a) - s, len(a), len(b) - s, len(b)


def _describe(field: str, row: dict, atoms) -> object:
    if field == "key":
        return shape_text(atoms.get(row["key"])) if row["key"] >= 0 else "-"
    return row[field]


def _compare(report, gid, members, culprits, rep: dict, dev: dict, atoms) -> None:
    for field, found_kind in FIELDS:
        if rep[field] == dev[field]:
            continue
        exp, act = _describe(field, rep, atoms), _describe(field, dev, atoms)
        what = {"op": "op", "dtype": "dtype", "reduce_op": "reduce op", "root": "root", "key": "shape"}[field]

        def message(f, what=what, rep=rep):
            bad = ", ".join(f"rank {r}: {f.actual[r]}" for r in f.culprit_ranks if r in f.actual)
            return f"{rep['op']} #{f.seq} on {group_text(f.group)}: {what} {f.expected} on the other ranks, but {bad}"

        report.add(
            found_kind,
            gid,
            rep["seq"],
            dev["rank"],
            op=rep["op"],
            expected=exp,
            actual=act,
            frame=frame_text(dev),
            members=members,
            message=message,
            rep_frame=frame_text(rep),
        )
        for r in culprits:
            if r != dev["rank"]:
                report.add(
                    found_kind,
                    gid,
                    rep["seq"],
                    r,
                    op=rep["op"],
                    expected=exp,
                    actual=exp,
                    frame=frame_text(rep),
                    members=members,
                    message=message,
                )
        if field == "op":
            return  # a different op makes the other fields meaningless


def _missing(report, gid, members, culprits, skipped: list[dict], rank, dev_rows, j, trace) -> None:
    first = skipped[0]
    before = dev_rows[j - 1] if j > 0 else None
    stopped = j >= len(dev_rows)
    status = trace.status.get(rank, {})
    detail = "stopped" if stopped else "skipped"

    def message(f, first=first, n=len(skipped), stopped=stopped, before=before, status=status):
        many = len(f.culprit_ranks) > 1
        who = f"rank{'s' if many else ''} {ranks_text(f.culprit_ranks)}"
        what = f"{first['op']} #{first['seq']} on {group_text(f.group)} ({frame_text(first)})"
        if stopped:
            tail = f" and the {n - 1} collectives after it" if n > 1 else ""
            if status.get("status") == "truncated":  # all that is known: the stream stops here
                return (
                    f"{who}'s stream{'s end' if many else ' ends'} before {what}{tail}, which the other ranks "
                    "issued: it ends early (truncated file), so what the rank did next is not recorded"
                )
            why = (
                f"; the rank ended with {status['status']}" + (f": {status['error']}" if status.get("error") else "")
                if status.get("status", "ok") != "ok"
                else ""
            )
            return f"{who} never issued {what}{tail}{why}"
        more = f" (and {n - 1} more after it)" if n > 1 else ""
        after = f", going from {before['op']} #{before['seq']} straight on" if before else ""
        return f"{who} skipped {what}{more}{after}; the other ranks issued it"

    for r in culprits:
        report.add(
            MISSING_COLLECTIVE,
            gid,
            first["seq"],
            r,
            op=first["op"],
            expected=f"{first['op']} #{first['seq']}",
            actual="missing",
            frame=frame_text(before) if before and r == rank else "-",
            members=members,
            message=message,
            rep_frame=frame_text(first),
            detail=detail,
            count=len(skipped),
        )


def _extra(report, gid, members, culprits, added: list[dict], rep_rows, i) -> None:
    first = added[0]
    pos = rep_rows[i]["seq"] if i < len(rep_rows) else (rep_rows[-1]["seq"] + 1 if rep_rows else 0)

    def message(f, first=first, n=len(added)):
        who = f"rank{'s' if len(f.culprit_ranks) > 1 else ''} {ranks_text(f.culprit_ranks)}"
        more = f" (and {n - 1} more)" if n > 1 else ""
        return (
            f"{who} issued an extra {first['op']} on {group_text(f.group)} at {frame_text(first)}{more}, "
            f"before position #{f.seq} of the other ranks, who never issued it"
        )

    for r in culprits:
        report.add(
            MISSING_COLLECTIVE,
            gid,
            pos,
            r,
            op=first["op"],
            expected="nothing",
            actual=f"{first['op']} (own seq {first['seq']})",
            frame=frame_text(first),
            members=members,
            message=message,
            detail="extra",
            count=len(added),
        )
