"""Point-to-point: sends and receives matched per (group, src, dst) in issue order.

The recorder numbers p2p per (group, src, dst) pair on both sides, so matching is one join on
(group, src, dst, seq): a send without its receive (or the reverse) is `unmatched_p2p` (culprit:
the rank whose op has no partner), a pair whose shape or dtype differ is `p2p_mismatch` (two
parties, no majority: both are culprits). Batched p2p needs nothing special: order inside a
batch_isend_irecv does not change the per-pair numbering.
"""

from __future__ import annotations

import polars as pl

from analyzer.checks.common import atom_values, group_table, shape_text
from analyzer.findings import Finding, group_text
from analyzer.trace import Trace


def check(trace: Trace) -> list[Finding]:
    cols = ["group", "seq", "dtype", "in_shapes", "out_shapes", "frame", "module", "tag", "idx"]
    ev = trace.select("rank", "op", "peer", *cols, ops=["send", "recv"]).with_columns(op=pl.col("op").cast(pl.String))
    if ev.is_empty():
        return []
    groups = group_table(trace)
    present = set(trace.ranks)
    sends = ev.filter(pl.col("op") == "send").select(*cols, src="rank", dst="peer")
    recvs = ev.filter((pl.col("op") == "recv") & (pl.col("peer") >= 0)).select(*cols, src="peer", dst="rank")
    both = sends.join(recvs, on=["group", "src", "dst", "seq"], how="full", suffix="_r", coalesce=True)
    # only unmatched or disagreeing pairs go on (atoms are interned, so equal shapes = equal ids)
    both = both.filter(
        pl.col("idx").is_null()
        | pl.col("idx_r").is_null()
        | (pl.col("dtype") != pl.col("dtype_r"))
        | (pl.col("in_shapes") != pl.col("out_shapes_r"))
    )
    atoms = atom_values(
        trace, set(both["in_shapes"].drop_nulls().to_list()) | set(both["out_shapes_r"].drop_nulls().to_list())
    )
    out: list[Finding] = []
    for row in both.to_dicts():
        gid, src, dst = row["group"], row["src"], row["dst"]
        group = groups.get(gid)
        if row["idx"] is None or row["idx_r"] is None:
            sender_side = row["idx"] is not None
            issuer, other = (src, dst) if sender_side else (dst, src)
            if other not in present:
                continue  # the partner left no stream: reported as a missing rank, not a bug
            op = "send" if sender_side else "recv"
            frame = _where(row, "" if sender_side else "_r")
            partner = "recv" if sender_side else "send"
            out.append(
                Finding(
                    kind="unmatched_p2p",
                    ranks=sorted({src, dst}),
                    culprit_ranks=[issuer],
                    group=group,
                    seq=row["seq"],
                    op=op,
                    expected=f"a matching {partner} on rank {other}",
                    actual={issuer: op},
                    frames={issuer: frame},
                    message=(
                        f"rank {issuer}'s {op} #{row['seq']} {'to' if sender_side else 'from'} rank {other} on "
                        f"{group_text(group)} ({frame}) has no matching {partner}: rank {other} never "
                        f"{'receives' if sender_side else 'sends'} it"
                    ),
                )
            )
            continue
        sent = (row["dtype"], atoms.get(row["in_shapes"]))
        got = (row["dtype_r"], atoms.get(row["out_shapes_r"]))
        if sent != got:
            out.append(
                Finding(
                    kind="p2p_mismatch",
                    ranks=sorted({src, dst}),
                    culprit_ranks=sorted({src, dst}),
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
            )
    return out


def _where(row: dict, side: str) -> str:
    frame = row.get("frame" + side) or "?"
    module = row.get("module" + side)
    return f"{frame} [{module}]" if module else frame
