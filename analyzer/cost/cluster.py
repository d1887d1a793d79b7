"""A cluster to price a trace on: GPUs per node, the links inside and between nodes, and where
each rank runs (`ClusterSpec`); named presets calibrated to published nccl-tests numbers
(docs/cost-model.md cites them), or a TOML file.

    [cluster]
    base = "h100-dgx"          # optional: start from a preset, override what follows
    name = "my-h100"
    gpus_per_node = 8
    intra_gbps = 370.0         # ring bus bandwidth inside a node (NVLink / NVSwitch), GB/s
    intra_latency_us = 12.0
    nvls_gbps = 480.0          # NVLink SHARP all_reduce bus bandwidth (0: none)
    inter_gbps = 46.0          # per GPU, across nodes (its NIC), GB/s
    inter_latency_us = 30.0
    intra_small_latency_us = 29.0  # small messages (NCCL's LL / LL128): alpha and share of bandwidth
    intra_small_fraction = 0.64
    ranks_per_node = 8         # placement: consecutive ranks fill a node (torchrun's order)
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

import polars as pl

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ClusterError(ValueError):
    """A cluster spec that cannot be used; the message is one line."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ClusterSpec:
    """Links and placement; bandwidths in GB/s (1e9 bytes per second, as nccl-tests reports),
    latencies in microseconds."""

    name: str
    """Preset name or the TOML's `name` (its file name by default)."""
    gpus_per_node: int
    """GPUs that share one NVLink / NVSwitch domain (72 on a GB200 NVL72 rack)."""
    intra_gbps: float
    """Bus bandwidth a ring collective reaches inside a node (NCCL_ALGO=Ring busbw)."""
    intra_latency_us: float
    """Fixed cost of one collective inside a node (alpha)."""
    nvls_gbps: float = 0.0
    """all_reduce bus bandwidth with NVLink SHARP (NCCL's NVLS) inside a node; 0: no NVLS."""
    inter_gbps: float
    """Achievable bandwidth of one GPU's network link (its NIC or rail), per direction."""
    inter_latency_us: float
    """Fixed cost of one collective that crosses nodes (alpha)."""
    intra_small_latency_us: float = 0.0
    """Small messages inside a node: the fixed cost of NCCL's low-latency protocols (LL / LL128)."""
    intra_small_fraction: float = 0.0
    """Small messages inside a node: the share of the bandwidth those protocols reach (0: not
    modelled). A collective takes min(alpha + beta, small alpha + beta / fraction)."""
    inter_small_latency_us: float = 0.0
    """As intra_small_latency_us, for a collective that crosses nodes."""
    inter_small_fraction: float = 0.0
    """As intra_small_fraction, for a collective that crosses nodes (0: not modelled)."""
    ranks_per_node: int = 0
    """Ranks placed on each node, consecutive ranks together as torchrun places them (node of
    rank r = r // ranks_per_node); 0: gpus_per_node."""
    source: str = ""
    """Where the numbers come from (docs/cost-model.md has the figures and links)."""

    @property
    def per_node(self) -> int:
        """Ranks per node under the placement."""
        return self.ranks_per_node or self.gpus_per_node

    def node_of(self, rank: pl.Expr) -> pl.Expr:
        """The node a rank runs on (an expression over a rank column)."""
        return (rank // self.per_node).cast(pl.Int64)

    def with_ranks_per_node(self, ranks_per_node: int | None) -> ClusterSpec:
        """The same cluster with another placement (None: unchanged)."""
        if ranks_per_node is None:
            return self
        spec = dataclasses.replace(self, ranks_per_node=ranks_per_node)
        _validate(spec)
        return spec


PRESETS: dict[str, ClusterSpec] = {
    c.name: c
    for c in (
        ClusterSpec(
            name="h100-dgx",
            gpus_per_node=8,
            intra_gbps=370.0,
            intra_latency_us=76.0,
            nvls_gbps=480.0,
            intra_small_latency_us=29.0,
            intra_small_fraction=0.64,
            inter_gbps=46.0,
            inter_latency_us=100.0,
            source="DGX H100: NVLink4 ring 370 / NVLS 480 GB/s busbw (nccl-tests#212); 8x CX-7 400 Gb/s",
        ),
        ClusterSpec(
            name="h200-dgx",
            gpus_per_node=8,
            intra_gbps=370.0,
            intra_latency_us=76.0,
            nvls_gbps=470.0,
            intra_small_latency_us=29.0,
            intra_small_fraction=0.64,
            inter_gbps=46.0,
            inter_latency_us=100.0,
            source="ND H200 v5 all_reduce (Azure AI-benchmarking-guide); 8x CX-7 400 Gb/s",
        ),
        ClusterSpec(
            name="a100-dgx",
            gpus_per_node=8,
            intra_gbps=223.0,
            intra_latency_us=220.0,
            intra_small_latency_us=41.0,
            intra_small_fraction=0.60,
            inter_gbps=23.0,
            inter_latency_us=100.0,
            source="ND A100 v4 all_reduce (Azure AI-benchmarking-guide); 8x HDR 200 Gb/s",
        ),
        ClusterSpec(
            name="gb200-nvl72",
            gpus_per_node=72,
            intra_gbps=653.0,
            intra_latency_us=36.0,
            intra_small_latency_us=6.0,
            intra_small_fraction=0.19,
            inter_gbps=46.0,
            inter_latency_us=100.0,
            source="ND GB200 v6 all_reduce, 4 GPUs (Azure AI-benchmarking-guide); 1x CX-7 400 Gb/s per GPU",
        ),
        ClusterSpec(
            name="h100-a3mega",
            gpus_per_node=8,
            intra_gbps=370.0,
            intra_latency_us=76.0,
            nvls_gbps=480.0,
            intra_small_latency_us=29.0,
            intra_small_fraction=0.64,
            inter_gbps=23.0,
            inter_latency_us=930.0,
            inter_small_latency_us=137.0,
            inter_small_fraction=0.10,
            source="GCP A3 Mega, 2x8 H100, 8x 200 Gb/s GPUDirect-TCPXO: all_reduce_perf 16 ranks",
        ),
    )
}
"""Named clusters (`--cluster NAME`); docs/cost-model.md gives each figure's source and fit."""

DEFAULT = "h100-dgx"
"""The preset `analyzer report` prices a trace on unless told otherwise."""

_FIELDS = {f.name: f.type for f in dataclasses.fields(ClusterSpec)}


def load_cluster(spec: str, ranks_per_node: int | None = None) -> ClusterSpec:
    """A preset by name or a TOML file's [cluster] table (optionally `base = "preset"`), with the
    placement overridden by `ranks_per_node`. ClusterError (one line) for anything unusable."""
    if spec in PRESETS:
        return PRESETS[spec].with_ranks_per_node(ranks_per_node)
    if not (spec.endswith(".toml") or os.path.exists(spec)):
        raise ClusterError(f"unknown cluster {spec!r}: a preset ({', '.join(PRESETS)}) or a TOML file")
    try:
        with open(spec, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise ClusterError(f"{spec}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"{spec}: not valid TOML: {e}") from None
    table = doc.get("cluster", doc)
    if not isinstance(table, dict):
        raise ClusterError(f"{spec}: [cluster] must be a table")
    return from_table(table, default_name=os.path.splitext(os.path.basename(spec))[0], where=spec).with_ranks_per_node(
        ranks_per_node
    )


def from_table(table: dict, *, default_name: str = "custom", where: str = "cluster") -> ClusterSpec:
    """A ClusterSpec from a TOML-like table (keys: ClusterSpec's fields, plus `base`)."""
    values: dict = {}
    base = table.get("base")
    if base is not None:
        if base not in PRESETS:
            raise ClusterError(f"{where}: base {base!r} is not a preset ({', '.join(PRESETS)})")
        values = {f: getattr(PRESETS[base], f) for f in _FIELDS}
        values["name"] = default_name
    unknown = sorted(set(table) - set(_FIELDS) - {"base"})
    if unknown:
        raise ClusterError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(_FIELDS)}, base)")
    values.update({k: v for k, v in table.items() if k != "base"})
    values.setdefault("name", default_name)
    missing = [
        f
        for f in ("gpus_per_node", "intra_gbps", "intra_latency_us", "inter_gbps", "inter_latency_us")
        if f not in values
    ]
    if missing:
        raise ClusterError(f"{where}: missing {missing[0]!r} (or name a preset with base = ...)")
    for key, value in values.items():
        want = _FIELDS[key]
        if want == "int" and type(value) is not int:
            raise ClusterError(f"{where}: {key} must be an integer, not {value!r}")
        if want == "float":
            if type(value) not in (int, float):
                raise ClusterError(f"{where}: {key} must be a number, not {value!r}")
            values[key] = float(value)
        if want == "str" and not isinstance(value, str):
            raise ClusterError(f"{where}: {key} must be a string, not {value!r}")
    spec = ClusterSpec(**values)
    _validate(spec, where)
    return spec


def _validate(spec: ClusterSpec, where: str = "cluster") -> None:
    for key in ("gpus_per_node", "intra_gbps", "inter_gbps"):
        if not getattr(spec, key) > 0:
            raise ClusterError(f"{where}: {key} must be positive, not {getattr(spec, key)!r}")
    for key in (
        "intra_latency_us",
        "inter_latency_us",
        "nvls_gbps",
        "intra_small_latency_us",
        "inter_small_latency_us",
    ):
        if getattr(spec, key) < 0:
            raise ClusterError(f"{where}: {key} must not be negative, not {getattr(spec, key)!r}")
    for key in ("intra_small_fraction", "inter_small_fraction"):
        if not 0 <= getattr(spec, key) <= 1:
            raise ClusterError(f"{where}: {key} must be in 0..1, not {getattr(spec, key)!r}")
    if spec.ranks_per_node < 0 or spec.ranks_per_node > spec.gpus_per_node:
        raise ClusterError(
            f"{where}: ranks_per_node {spec.ranks_per_node} must be 1..gpus_per_node ({spec.gpus_per_node})"
        )
