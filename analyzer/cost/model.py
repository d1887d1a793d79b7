"""Seconds per collective on a cluster: NCCL's algorithms as alpha-beta terms over the slowest
link a group crosses under the placement (docs/cost-model.md has the formulas and the fit).

    >>> op_seconds(trace.select("rank", "op", "group", "peer", "in_bytes", "out_bytes"), cluster, trace.groups)

Every formula is a polars expression over columns op, bytes, n (group size), nodes (nodes the
group spans), per_node (most members on one node): one pass per frame, no Python loop per event.
The message size is nccl-tests' `size`: the larger buffer side (all_gather: the whole output,
reduce_scatter: the whole input, all_reduce: the buffer, all_to_all: all that is sent).
"""

from __future__ import annotations

import polars as pl

from analyzer.cost.cluster import ClusterSpec
from traceformat import ops as op_table

GB = 1e9

ALL_REDUCE = ("all_reduce", "all_reduce_coalesced")
RING_HALF = tuple(sorted(op_table.GATHER_OPS | op_table.SCATTER_OPS))
"""all-gathers and reduce-scatters: each rank moves (n-1)/n of the message."""
ALL_TO_ALL = ("all_to_all", "all_to_all_single")
ONE_ROOT = ("broadcast", "reduce")
ROOT_PART = ("gather", "scatter")
P2P = tuple(sorted(op_table.P2P_OPS))
COMM = tuple(sorted(op_table.COMM_OPS))


def bus_factor(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """nccl-tests' busbw / algbw factor: 2(n-1)/n all_reduce, (n-1)/n all-gather, reduce-scatter
    and all_to_all, 1 otherwise (doc/PERFORMANCE.md of NVIDIA/nccl-tests)."""
    nf = n.cast(pl.Float64)
    return (
        pl.when(op.is_in(ALL_REDUCE))
        .then(2 * (nf - 1) / nf)
        .when(op.is_in(RING_HALF + ALL_TO_ALL + ROOT_PART))
        .then((nf - 1) / nf)
        .otherwise(1.0)
    )


def group_shape(groups: pl.DataFrame, cluster: ClusterSpec) -> pl.DataFrame:
    """Per group: gid, n (members), nodes (nodes it spans), per_node (most members on one
    node) under the cluster's placement."""
    per = (
        groups.select("gid", "ranks")
        .explode("ranks")
        .drop_nulls("ranks")
        .with_columns(node=cluster.node_of(pl.col("ranks")))
        .group_by("gid", "node")
        .agg(k=pl.len())
    )
    return (
        per.group_by("gid")
        .agg(
            n=pl.col("k").sum().cast(pl.Int64), nodes=pl.len().cast(pl.Int64), per_node=pl.col("k").max().cast(pl.Int64)
        )
        .with_columns(pl.col("gid").cast(pl.Int32))
    )


def seconds_expr(cluster: ClusterSpec) -> tuple[pl.Expr, pl.Expr]:
    """(seconds, algorithm) over columns op (String), bytes, n, nodes, per_node: the time of
    one collective and the NCCL algorithm the model takes for it (the fastest it offers)."""
    op, s = pl.col("op"), pl.col("bytes").cast(pl.Float64).clip(lower_bound=0)
    n, nodes, k = (pl.col(c).cast(pl.Float64) for c in ("n", "nodes", "per_node"))
    intra, inter = cluster.intra_gbps * GB, cluster.inter_gbps * GB
    nvls = cluster.nvls_gbps * GB
    one_node = pl.col("nodes") <= 1
    alpha = pl.when(one_node).then(cluster.intra_latency_us * 1e-6).otherwise(cluster.inter_latency_us * 1e-6)
    # a ring that leaves the node crosses it on the NICs of the group's members there: k rails
    ring_bw = pl.when(one_node).then(pl.lit(intra)).otherwise(pl.min_horizontal(pl.lit(intra), k * inter))
    ar = 2 * (n - 1) / n * s
    ar_ring = alpha + ar / ring_bw
    ar_nvls = alpha + ar / nvls if nvls > 0 else pl.lit(float("inf"))
    local_bw = nvls if nvls > 0 else intra
    # tree / NVLSTree: reduce inside each node, all_reduce the node's share across nodes on its k
    # NICs, broadcast back inside; pipelined, so the slower stage sets the pace
    ar_tree = alpha + pl.max_horizontal(2 * (k - 1) / k * s / local_bw, 2 * (nodes - 1) / nodes * s / (k * inter))
    ar_multi = pl.min_horizontal(ar_ring, ar_tree)
    ar_best = pl.when(one_node).then(pl.min_horizontal(ar_ring, ar_nvls)).otherwise(ar_multi)
    ar_algo = (
        pl.when(one_node)
        .then(pl.when(ar_nvls < ar_ring).then(pl.lit("nvls")).otherwise(pl.lit("ring")))
        .otherwise(
            pl.when(ar_tree < ar_ring).then(pl.lit("nvls_tree" if nvls > 0 else "tree")).otherwise(pl.lit("ring"))
        )
    )
    half = alpha + (n - 1) / n * s / ring_bw
    # pairwise all_to_all: (n-1)/n of the message leaves each rank, (n-k)/n of it off the node on
    # its own NIC, the rest over NVLink; both at once
    a2a = alpha + pl.when(one_node).then((n - 1) / n * s / intra).otherwise(
        pl.max_horizontal((n - k) / n * s / inter, (k - 1) / n * s / intra)
    )
    p2p = alpha + s / pl.when(one_node).then(pl.lit(intra)).otherwise(pl.lit(inter))
    seconds = (
        pl.when(pl.col("n") <= 1)
        .then(0.0)
        .when(op.is_in(ALL_REDUCE))
        .then(ar_best)
        .when(op.is_in(RING_HALF))
        .then(half)
        .when(op.is_in(ALL_TO_ALL))
        .then(a2a)
        .when(op.is_in(ONE_ROOT))
        .then(alpha + s / ring_bw)
        .when(op.is_in(ROOT_PART))
        .then(half)
        .when(op.is_in(P2P))
        .then(p2p)
        .when(op == "barrier")
        .then(alpha)
        .otherwise(0.0)
    )
    seconds = _small_messages(seconds, alpha, one_node, cluster)
    algo = (
        pl.when(pl.col("n") <= 1)
        .then(pl.lit("local"))
        .when(op.is_in(ALL_REDUCE))
        .then(ar_algo)
        .when(op.is_in(ALL_TO_ALL))
        .then(pl.lit("pairwise"))
        .when(op.is_in(P2P))
        .then(pl.lit("p2p"))
        .when(op == "barrier")
        .then(pl.lit("latency"))
        .when(op.is_in(COMM))
        .then(pl.lit("ring"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )
    return seconds.alias("seconds"), algo.alias("algo")


def _small_messages(seconds: pl.Expr, alpha: pl.Expr, one_node: pl.Expr, cluster: ClusterSpec) -> pl.Expr:
    """NCCL's low-latency protocols (LL, LL128) for small messages: a smaller alpha, a share of
    the bandwidth; the faster of the two wins, as NCCL's tuner picks per size. Off (fraction 0)
    for a link class without a fit."""

    def small(lat: float, frac: float) -> pl.Expr:
        if frac <= 0:
            return seconds
        return pl.min_horizontal(seconds, lat * 1e-6 + (seconds - alpha).clip(lower_bound=0) / frac)

    inside = small(cluster.intra_small_latency_us, cluster.intra_small_fraction)
    across = small(cluster.inter_small_latency_us, cluster.inter_small_fraction)
    return pl.when(one_node).then(inside).otherwise(across)


def op_seconds(frame: pl.DataFrame, cluster: ClusterSpec, groups: pl.DataFrame) -> pl.DataFrame:
    """`frame` (columns op, group, in_bytes, out_bytes; rank and peer for send / recv) plus
    bytes, n, nodes, per_node, seconds and algo. Rows that move no data (waits, markers, groups)
    cost 0 s. A send / recv is priced on its two ends' link (same node or not)."""
    shape = group_shape(groups, cluster)
    out = frame.with_columns(
        pl.col("op").cast(pl.String).alias("op"),
        bytes=pl.max_horizontal("in_bytes", "out_bytes").clip(lower_bound=0),
    ).join(shape, left_on="group", right_on="gid", how="left", maintain_order="left")
    if "peer" in out.columns and "rank" in out.columns:
        is_p2p = pl.col("op").is_in(P2P) & (pl.col("peer") >= 0)
        cross = cluster.node_of(pl.col("rank")) != cluster.node_of(pl.col("peer"))
        out = out.with_columns(
            n=pl.when(is_p2p).then(2).otherwise(pl.col("n")),
            nodes=pl.when(is_p2p).then(pl.when(cross).then(2).otherwise(1)).otherwise(pl.col("nodes")),
            per_node=pl.when(is_p2p).then(pl.when(cross).then(1).otherwise(2)).otherwise(pl.col("per_node")),
        )
    out = out.with_columns(pl.col("n", "nodes", "per_node").fill_null(1))
    seconds, algo = seconds_expr(cluster)
    return out.with_columns(seconds, algo)


def collective_seconds(
    op: str, nbytes: float, n: int, cluster: ClusterSpec, *, nodes: int = 1, per_node: int = 0
) -> float:
    """One collective's time (the same expressions, on one row): `n` ranks over `nodes` nodes,
    `per_node` of them on each (default n / nodes)."""
    frame = pl.DataFrame(
        {"op": [op], "bytes": [float(nbytes)], "n": [n], "nodes": [nodes], "per_node": [per_node or -(-n // nodes)]}
    )
    seconds, _ = seconds_expr(cluster)
    return float(frame.select(seconds).item())


def algorithm(op: str, nbytes: float, n: int, cluster: ClusterSpec, *, nodes: int = 1, per_node: int = 0) -> str:
    """The algorithm the model takes for one collective (ring, nvls, tree, nvls_tree, ...)."""
    frame = pl.DataFrame(
        {"op": [op], "bytes": [float(nbytes)], "n": [n], "nodes": [nodes], "per_node": [per_node or -(-n // nodes)]}
    )
    _, algo = seconds_expr(cluster)
    return str(frame.select(algo).item())


def busbw(op: str, nbytes: float, n: int, cluster: ClusterSpec, *, nodes: int = 1, per_node: int = 0) -> float:
    """The bus bandwidth (GB/s) nccl-tests would print for the model's time."""
    t = collective_seconds(op, nbytes, n, cluster, nodes=nodes, per_node=per_node)
    factor = pl.select(bus_factor(pl.lit(op), pl.lit(n))).item()
    return nbytes * factor / t / GB
