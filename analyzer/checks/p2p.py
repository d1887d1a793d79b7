"""Point-to-point: sends and receives matched per (group, src, dst) in issue order.

The recorder numbers p2p per (group, src, dst) pair on both sides, so matching is one join on
(group, src, dst, seq): a send without its receive (or the reverse) is `unmatched_p2p` (culprit:
p2p_cause.py decides -- the rank that addressed a wrong peer, the issuer in a dry run, the
partner that never got there in a post-mortem), a pair whose shape or dtype differ is `p2p_mismatch`
(culprit: the side whose dtype and shape fewer other transfers on the group moved -- a pipeline sends
one activation shape -- else both). It is the verdict of its own: the two ranks stuck in its two
sides wait on each other, but in one transfer, not in an ordering cycle (ordering.one_transfer).
Batched p2p needs nothing special: order inside a batch_isend_irecv does not change the per-pair
numbering.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from analyzer.checks.common import atom_values, group_table
from analyzer.checks.options import Checked, CheckOptions
from analyzer.checks.p2p_cause import Unmatched, causes
from analyzer.model.findings import Finding, Kind
from analyzer.model.text import group_text, shape_text
from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import WaitKey
from traceformat.ops import P2P_OPS

P2P_MISMATCH = Kind(name="p2p_mismatch", about="a matched send and recv that disagree on shape, dtype or tag")


def check(trace: Trace, options: CheckOptions) -> Checked:
    found, lone, groups = _matched(trace)
    return Checked(findings=[f for f, _ in causes(trace, lone, groups)] + [f for f, _ in found])


def mismatch_causes(trace: Trace) -> list[tuple[Finding, set[WaitKey]]]:
    """check's p2p_mismatch findings, each with the two p2p keys of its transfer: what `hang`
    names as the root cause of the ranks blocked in it."""
    return _matched(trace)[0]


def unmatched_causes(trace: Trace) -> list[tuple[Finding, set[WaitKey]]]:
    """check's unmatched_p2p findings, each with the p2p keys (either side) it explains: what
    `hang` names as the root cause of a rank blocked on one of those keys."""
    _, lone, groups = _matched(trace)
    return causes(trace, lone, groups)


def _matched(trace: Trace) -> tuple[list[tuple[Finding, set[WaitKey]]], list[Unmatched], dict]:
    """(p2p_mismatch findings with their keys, the sends / recvs nobody matches, the group table)."""
    pats = trace.patterns.with_columns(op=pl.col("op").cast(pl.String)).filter(pl.col("op").is_in(sorted(P2P_OPS)))
    if pats.is_empty():
        return [], [], {}
    groups = group_table(trace)
    # lean rows first (tens of millions in a pipeline at scale): keys, idx and pattern code only
    pats = pats.with_columns(is_send=pl.col("op") == "send")
    ev = trace.with_codes(trace.stream.select("rank", "idx", "code", "seq"), pats)
    table = trace.patterns.select(pl.col("dtype").to_physical().cast(pl.Int64), "in_shapes", "out_shapes")
    dtype, ins, outs = (np.r_[table[c].fill_null(-3).to_numpy(), -2] for c in ("dtype", "in_shapes", "out_shapes"))
    both = _by_instance(trace, pats, ev, dtype, ins, outs)
    if both is None:  # a key used twice on one side (or a trace without per-rank patterns): a join
        both = _by_join(trace, pats, ev, dtype, ins, outs)
    usual = _usual(trace, pats, ev) if len(both) else None
    del ev
    full = pats.select("code", "dtype", "in_shapes", "out_shapes", "frame", "module", "tag")
    both = both.join(full, on="code", how="left", maintain_order="left").join(
        full.rename(lambda c: c + "_r"), on="code_r", how="left", maintain_order="left"
    )
    atoms = atom_values(
        trace,
        set(both["in_shapes"].drop_nulls().to_list()) | set(both["out_shapes_r"].drop_nulls().to_list()),
    )
    out: list[tuple[Finding, set[WaitKey]]] = []
    lone: list[Unmatched] = []
    for row in both.to_dicts():
        gid, src, dst = row["group"], row["src"], row["dst"]
        group = groups.get(gid)
        if row["idx"] is None or row["idx_r"] is None:
            sender_side = row["idx"] is not None
            lone.append(Unmatched(gid, src, dst, row["seq"], sender_side, _where(row, "" if sender_side else "_r")))
            continue
        sent = (row["dtype"], atoms.get(row["in_shapes"]))
        got = (row["dtype_r"], atoms.get(row["out_shapes_r"]))
        if sent != got:
            culprits = _odd_side(usual, gid, (row["dtype"], row["in_shapes"]), (row["dtype_r"], row["out_shapes_r"]))
            key = WaitKey("s", gid, row["seq"], src, dst)
            finding = Finding(
                kind=P2P_MISMATCH,
                ranks=sorted({src, dst}),
                culprit_ranks=sorted({src, dst} if culprits is None else {(src, dst)[culprits]}),
                group=group,
                seq=row["seq"],
                op="send/recv",
                expected=f"{sent[0]} {shape_text(sent[1])}",
                actual={
                    src: f"sends {sent[0]} {shape_text(sent[1])}",
                    dst: f"receives {got[0]} {shape_text(got[1])}",
                },
                frames={src: _where(row, ""), dst: _where(row, "_r")},
                message=(
                    f"p2p #{row['seq']} {src}->{dst} on {group_text(group)}: rank {src} sends "
                    f"{sent[0]} {shape_text(sent[1])} ({_where(row, '')}) but rank {dst} receives "
                    f"{got[0]} {shape_text(got[1])} ({_where(row, '_r')})"
                ),
            )
            out.append((finding, {key, key.partner()}))
    return out, lone, groups


def _usual(trace: Trace, pats: pl.DataFrame, ev: pl.DataFrame) -> dict:
    """(group, dtype, shape atom) -> how many p2p sides moved that (a send's input, a recv's output)."""
    side = pats.select(
        "code",
        "group",
        dtype=pl.col("dtype").cast(pl.String),
        shape=pl.when(pl.col("is_send")).then("in_shapes").otherwise("out_shapes"),
    )
    counts = ev.select("code").join(side, on="code").group_by("group", "dtype", "shape").len()
    return {(g, d, sh): n for g, d, sh, n in counts.iter_rows()}


def _odd_side(usual: dict | None, gid: int, sent: tuple, got: tuple) -> int | None:
    """0 (the sender) or 1 (the receiver): the side whose (dtype, shape) fewer other transfers on
    the group moved; None when as many did (no way to tell: both are culprits)."""
    if usual is None:
        return None
    n_sent = usual.get((gid, str(sent[0]), sent[1]), 0)
    n_got = usual.get((gid, str(got[0]), got[1]), 0)
    return None if n_sent == n_got else (0 if n_sent < n_got else 1)


def _by_instance(trace: Trace, pats, ev, dtype, ins, outs) -> pl.DataFrame | None:
    """The unmatched or disagreeing pairs, matched without a join: each (group, src, dst) channel
    is keyed once per pattern code (a code belongs to one rank), its seqs numbered densely after
    the channels before it, so each side's rows land in one array slot per instance. None where
    that does not hold: a key issued twice on one side, a negative seq, a code of two ranks."""
    code, rank, seq = (ev[c].to_numpy() for c in ("code", "rank", "seq"))
    n_codes = trace.patterns.height
    code_rank = trace.patterns["rank"].to_numpy()
    if not len(code) or seq.min() < 0 or not (code_rank[code] == rank).all():
        return None
    per = trace.patterns.select("code").join(
        pats.select("code", "is_send", "peer", "group"), on="code", how="left", maintain_order="left"
    )
    send_c = per["is_send"].fill_null(False).to_numpy()
    peer_c, group_c = (per[c].fill_null(-1).to_numpy().astype(np.int64) for c in ("peer", "group"))
    used = np.zeros(n_codes, dtype=bool)
    used[code] = True
    used &= send_c | (peer_c >= 0)  # a recv from any source has no key: not matched, as before
    u = np.flatnonzero(used)
    src = np.where(send_c[u], code_rank[u], peer_c[u])
    dst = np.where(send_c[u], peer_c[u], code_rank[u])
    keys = pl.DataFrame({"g": group_c[u], "src": src, "dst": dst})
    dense = keys.select(pl.struct("g", "src", "dst").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    chan_of = np.full(n_codes, -1, dtype=np.int64)
    chan_of[u] = dense
    row_chan = chan_of[code]
    rows = np.flatnonzero(row_chan >= 0)
    n_chan = int(dense.max()) + 1 if len(dense) else 0
    span = np.zeros(n_chan, dtype=np.int64)
    np.maximum.at(span, row_chan[rows], seq[rows].astype(np.int64) + 1)
    offset = np.r_[0, np.cumsum(span)[:-1]]
    inst = offset[row_chan[rows]] + seq[rows]
    is_send = send_c[code[rows]]
    n_inst = int(span.sum())
    at = []
    for mask in (is_send, ~is_send):
        i, r = inst[mask], rows[mask]
        if (np.bincount(i, minlength=n_inst) > 1).any():
            return None
        slot = np.full(n_inst, -1, dtype=np.int64)
        slot[i] = r
        at.append(slot)
    s_at, r_at = at
    both_sides = (s_at >= 0) & (r_at >= 0)
    cs, cr = code[np.maximum(s_at, 0)], code[np.maximum(r_at, 0)]
    keep = ((s_at >= 0) ^ (r_at >= 0)) | (both_sides & ((dtype[cs] != dtype[cr]) | (ins[cs] != outs[cr])))
    k = np.flatnonzero(keep)  # in channel order, then seq: deterministic
    s_row, r_row = s_at[k], r_at[k]
    one = np.where(s_row >= 0, s_row, r_row)
    c1 = code[one]
    src = np.where(send_c[c1], code_rank[c1], peer_c[c1])
    dst = np.where(send_c[c1], peer_c[c1], code_rank[c1])
    idx = ev["idx"].to_numpy()

    def side(values, at):
        return pl.Series(values[np.maximum(at, 0)]).scatter(np.flatnonzero(at < 0), None)

    return pl.DataFrame(
        {
            "group": group_c[c1].astype(np.int32),
            "seq": seq[one],
            "src": src.astype(np.int32),
            "dst": dst.astype(np.int32),
            "idx": side(idx, s_row),
            "code": side(code, s_row),
            "idx_r": side(idx, r_row),
            "code_r": side(code, r_row),
        }
    )


def _by_join(trace: Trace, pats, ev, dtype, ins, outs) -> pl.DataFrame:
    """The unmatched or disagreeing pairs by a full join on (group, src, dst, seq)."""
    ev = trace.with_patterns(ev, "is_send", "peer", "group", table=pats)
    lean = ["group", "seq", "idx", "code"]
    sends = ev.filter(pl.col("is_send")).select(*lean, src="rank", dst="peer")
    recvs = ev.filter(~pl.col("is_send") & (pl.col("peer") >= 0)).select(*lean, src="peer", dst="rank")
    both = sends.join(recvs, on=["group", "src", "dst", "seq"], how="full", suffix="_r", coalesce=True)
    del sends, recvs
    # atoms are interned, so equal shapes = equal ids; compared through per-pattern arrays by code
    n = trace.patterns.height
    code, code_r = (both[c].fill_null(n).to_numpy() for c in ("code", "code_r"))
    keep = (
        both["idx"].is_null().to_numpy()
        | both["idx_r"].is_null().to_numpy()
        | (dtype[code] != dtype[code_r])
        | (ins[code] != outs[code_r])
    )
    return both.filter(pl.Series(keep))


def _where(row: dict, side: str) -> str:
    frame = row.get("frame" + side) or "?"
    module = row.get("module" + side)
    return f"{frame} [{module}]" if module else frame
