"""Normalize a trace into what is comparable across runs: one signature string per event.

Two recordings of the same program differ in timestamps, in torch's process-group names
(creation ids), in gids (merge order) and in where the checkout lives. None of that is the
comm pattern. Here, per event that communicates or builds groups:

- group -> `gkey`: the mesh dim label and size ("dp_shard/4"), or, for groups without a mesh
  dim, the member coordinates relative to the group's first member ("group/+0+2+4"), so
  sibling groups [0,2,4] and [1,3,5] read the same and torch's group names never appear;
  a default group that a 1-D mesh reuses takes that mesh dim's name ("world" -> "dp_shard");
- root (broadcast, reduce, gather, scatter) -> its index within the group; p2p peer -> its
  offset from this rank within the group (a pipeline "send to next stage" is +1 on every rank);
- signature = op, gkey, dtype, input/output shapes, reduce op, root / peer offset, tag, splits;
  group creation and mesh ops: op, gkey and the mesh shape/dims (not absolute ranks);
- timestamps, gids, seq, async flags, waits and redistribute markers are left out; module,
  phase, step and frame travel alongside as context (frame reduced to `file:line in fn`, each of
  the user's line and the library's where it names both, so
  checkouts in different folders compare equal).

`Options` says what else is noise for the comparison at hand. By default (`analyzer diff`):
mesh dims that name the same thing in different TorchTitan versions read as one (`dp_shard` is
`fsdp`), and group creation, mesh events and collectives on size-1 groups stay out of the stream
(TorchTitan creates every size-1 mesh dim; a size-1 collective moves nothing), so the first
divergence shown is a communication difference. Goldens compare with `Options.strict()`.

Columnar: atom ids become strings through one gather per column over a per-atom lookup;
groups become keys once per group, not per event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analyzer.model.trace import Trace
from traceformat import format as fmt
from traceformat.ops import COMM_OPS, GROUP_OPS, P2P_OPS, ROOTED_OPS

STREAM_OPS = COMM_OPS | GROUP_OPS | {"mesh"}
"""What a rank's comparable stream holds (waits and redistribute markers are implied by these)."""
DIM_ALIASES = {"dp_shard": "fsdp", "dp_shard_cp": "fsdp", "dp_shard_in_ep": "ep", "dp_shard_mod_ep": "efsdp"}
"""Mesh dim names that mean the same dim: TorchTitan 0.2's names (and commtrace's before it) ->
TorchTitan 0.3's (FSDP over `fsdp`, experts over `ep`, their FSDP over `efsdp`)."""


@dataclass(kw_only=True, slots=True)
class Options:
    """What the comparison treats as noise."""

    aliases: dict[str, str] = field(default_factory=lambda: dict(DIM_ALIASES))
    """Mesh dim name -> the name it is compared as (applied to group labels before keying)."""
    groups: bool = False
    """Keep group creation (init_process_group, new_group, split_group) and mesh events."""
    size_one: bool = False
    """Keep collectives on groups of one rank (they move no data)."""

    @classmethod
    def strict(cls) -> Options:
        """Everything compared, names as recorded: what a golden snapshot needs."""
        return cls(aliases={}, groups=True, size_one=True)


def parse_aliases(items: list[str]) -> dict[str, str]:
    """["OLD=NEW", ...] -> {OLD: NEW}; ValueError (one line) on a malformed item."""
    out = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"--alias expects OLD=NEW (a mesh dim name and the name to compare it as), got {item!r}")
        out[old.strip()] = new.strip()
    return out


def group_keys(trace: Trace, aliases: dict[str, str] | None = None) -> pl.DataFrame:
    """gid -> dim (mesh dim label, or "group" for groups without one) and gkey (dim + size, or
    member offsets for groups without a mesh dim); `aliases` renames dims."""
    aliases = aliases or {}
    rows = []
    for g in trace.groups.iter_rows(named=True):
        ranks = list(g["ranks"])
        label = g["label"] or ""  # a default group a 1-D mesh reuses has that dim's name (trace.group_label)
        if label.startswith("group "):  # torch's creation-order name: not comparable across runs
            dim = "group"
            key = "group/" + "".join(f"+{r - ranks[0]}" if r >= ranks[0] else str(r - ranks[0]) for r in ranks)
        else:
            label = aliases.get(label, label)
            dim, key = label, f"{label}/{len(ranks)}"
        rows.append((g["gid"], dim, key))
    return pl.DataFrame(rows, schema={"gid": pl.Int32, "dim": pl.String, "gkey": pl.String}, orient="row")


def _atom_text(trace: Trace, column: str) -> pl.Expr:
    """Atom ids of `column` of the pattern table as compact text (one string per atom, one gather)."""

    def text(a):
        if column == "info" and isinstance(a, dict):  # mesh: shape and dims, not absolute ranks
            a = {k: a[k] for k in ("how", "shape", "dims", "api") if k in a}
        try:
            return json.dumps(a, separators=(",", ":"), sort_keys=True).replace(" ", "")
        except (TypeError, ValueError):  # not JSON (bytes, mixed key types): a corrupt atom, as text
            return repr(a)

    lookup = pl.Series([text(a) for a in trace.atoms] + [""], dtype=pl.String)
    ids = trace.patterns[column].to_numpy()
    return pl.lit(lookup.gather(np.where(ids < 0, len(trace.atoms), ids))).alias(column + "_text")


def _members(trace: Trace) -> pl.DataFrame:
    """(gid, member rank, index within the group): one row per membership."""
    return (
        trace.groups.select("gid", "ranks", "size")
        .with_columns(pos=pl.int_ranges(0, pl.col("size"), dtype=pl.Int32))
        .explode("ranks", "pos")
        .rename({"ranks": "member"})
        .select("gid", "member", "pos", "size")
    )


def normalize(trace: Trace, options: Options | None = None) -> pl.DataFrame:
    """One row per comparable event, in program order per rank: rank, pos (position in the
    rank's comparable stream), idx (position in the trace), sig, op, dim, gkey, bytes,
    module, phase, step, frame. `options`: what is left out (default: Options())."""
    options = options or Options()
    # signatures are a property of the pattern (each pattern row belongs to one rank): built once
    # per pattern, then gathered onto the events
    ev = trace.patterns.with_columns(_atom_text(trace, c) for c in ("in_shapes", "out_shapes", "splits", "info"))
    kept = STREAM_OPS if options.groups else COMM_OPS
    ev = ev.with_columns(op=pl.col("op").cast(pl.String)).filter(pl.col("op").is_in(sorted(kept)))
    members = _members(trace)
    ev = (
        ev.join(group_keys(trace, options.aliases), left_on="group", right_on="gid", how="left")
        .join(
            members.select("gid", "member", self_pos="pos", gsize="size"),
            left_on=["group", "rank"],
            right_on=["gid", "member"],
            how="left",
        )
        .join(
            members.select("gid", "member", peer_pos="pos"),
            left_on=["group", "peer"],
            right_on=["gid", "member"],
            how="left",
        )
    )
    if not options.size_one:  # no size: an event without a group (mesh) is kept
        ev = ev.filter(pl.col("gsize").fill_null(2) > 1)
    is_p2p = pl.col("op").is_in(sorted(P2P_OPS))
    where = (
        pl.when(is_p2p)
        .then(pl.format("peer=+{}", (pl.col("peer_pos") - pl.col("self_pos")) % pl.col("gsize")))
        .when(pl.col("op").is_in(sorted(ROOTED_OPS)))
        .then(pl.format("root={}", pl.col("peer_pos")))
        .otherwise(pl.lit(""))
    )
    comm = pl.col("op").is_in(sorted(COMM_OPS))
    sig = (
        pl.concat_str(
            [
                pl.col("op"),
                pl.col("gkey").fill_null("-"),
                pl.when(comm)
                .then(
                    pl.concat_str(
                        [
                            pl.col("dtype").cast(pl.String).fill_null(""),
                            pl.lit("in=") + pl.col("in_shapes_text"),
                            pl.lit("out=") + pl.col("out_shapes_text"),
                            pl.col("reduce_op").cast(pl.String).fill_null(""),
                            where.fill_null("peer=?"),
                            pl.when(is_p2p).then(pl.format("tag={}", "tag")).otherwise(pl.lit("")),
                            pl.col("splits_text"),
                        ],
                        separator=" ",
                    )
                )
                .otherwise(pl.col("info_text")),
            ],
            separator=" ",
        )
        .str.replace_all(r" +", " ")
        .str.strip_chars()
    )
    per_pattern = ev.select(
        "code",
        sig=sig,
        op="op",
        dim=pl.col("dim").fill_null("-"),
        gkey=pl.col("gkey").fill_null("-"),
        bytes=pl.max_horizontal("in_bytes", "out_bytes"),
        module=pl.col("module").cast(pl.String).fill_null(""),
        phase=pl.col("phase").cast(pl.String).fill_null(""),
        frame=pl.col("frame")
        .cast(pl.String)
        .fill_null("")
        .str.split(fmt.FRAME_VIA)
        .list.eval(pl.element().str.replace(r"^.*[/\\]", ""))
        .list.join(fmt.FRAME_VIA),
    )
    rows = trace.with_codes(trace.stream.select("rank", "idx", "code", "step"), per_pattern)
    rows = trace.with_patterns(rows, *[c for c in per_pattern.columns if c != "code"], table=per_pattern)
    return rows.select(
        "rank",
        pos=pl.int_range(pl.len(), dtype=pl.Int32).over("rank"),
        idx="idx",
        sig="sig",
        op="op",
        dim="dim",
        gkey="gkey",
        bytes="bytes",
        module="module",
        phase="phase",
        step="step",
        frame="frame",
    )


def rank_streams(norm: pl.DataFrame) -> pl.DataFrame:
    """rank -> h (a hash of its whole signature stream) and n (its length): ranks with equal
    hashes have equal streams, so classes form with one group-by."""
    return norm.group_by("rank").agg(h=pl.col("sig").sort_by("pos").str.join("\n").hash(), n=pl.len())
