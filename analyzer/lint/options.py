"""What every lint rule takes besides the trace (placement, an optional cost model), and what it
gives back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from analyzer.cost.cluster import ClusterSpec
from analyzer.cost.model import seconds_expr
from analyzer.model.findings import Finding

DEFAULT_RANKS_PER_NODE = 8
"""Without a cluster: consecutive ranks, 8 per node (torchrun's placement on 8-GPU nodes)."""


@dataclass(kw_only=True, slots=True)
class Placement:
    """Which node each rank runs on."""

    ranks_per_node: int = DEFAULT_RANKS_PER_NODE
    """GPUs (ranks) per node; ranks are placed consecutively (rank // ranks_per_node), as torchrun does."""
    node_of: dict[int, int] | None = None
    """An explicit rank -> node map (a cluster spec's placement); None: consecutive."""
    assumed: bool = True
    """True when nobody said (no --cluster, no --ranks-per-node): messages state the assumption."""

    def node(self, rank: pl.Expr) -> pl.Expr:
        """The node of each rank in `rank` (an integer expression)."""
        if self.node_of is not None:
            return rank.replace_strict(self.node_of, default=-1, return_dtype=pl.Int64)
        return rank.cast(pl.Int64) // self.ranks_per_node

    def spell(self) -> str:
        """How the placement was chosen, for messages."""
        if self.node_of is not None:
            return "under the cluster's placement"
        how = "assumed: pass --cluster or --ranks-per-node" if self.assumed else "as given"
        per = f"{self.ranks_per_node} consecutive ranks" if self.ranks_per_node > 1 else "1 rank"
        return f"with {per} per node ({how})"


CostFn = Callable[[pl.DataFrame], pl.Series]
"""A cost model: a frame of collectives (op, in_bytes, out_bytes, size: members, nodes: nodes the
group spans, per_node: most members on one node) -> seconds per row."""


@dataclass(kw_only=True, slots=True)
class LintOptions:
    """Options of `analyzer lint` (and of the advice `analyzer report` shows)."""

    placement: Placement = field(default_factory=Placement)
    """Rank -> node, for the rule on tp / cp / ep groups that cross nodes (and for the cost)."""
    cost: CostFn | None = None
    """With a cluster (--cluster): seconds per collective, to say what each advice costs per step."""
    cluster: str | None = None
    """The cluster's name, for messages."""


@dataclass(kw_only=True, slots=True)
class Linted:
    """The lint's result: advice, and notes on what a rule could not judge."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def extend(self, other: Linted) -> None:
        self.findings.extend(other.findings)
        self.notes.extend(other.notes)


def for_cluster(cluster: ClusterSpec) -> LintOptions:
    """Lint on a named cluster: its placement, and its cost model (analyzer.cost.model) for the
    time each advice costs per step."""
    seconds, _ = seconds_expr(cluster)

    def cost(frame: pl.DataFrame) -> pl.Series:
        return frame.select(
            pl.col("op"),
            bytes=pl.max_horizontal("in_bytes", "out_bytes").clip(lower_bound=0),
            n=pl.col("size"),
            nodes=pl.col("nodes"),
            per_node=pl.col("per_node"),
        ).select(seconds)["seconds"]

    placement = Placement(ranks_per_node=cluster.per_node, assumed=False)
    return LintOptions(placement=placement, cost=cost, cluster=cluster.name)
