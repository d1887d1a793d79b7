"""The shared vocabulary: the op table, wait keys, finding kinds and trace modes, each written
once and read everywhere (values below derived by hand from c10d's semantics)."""

import importlib
import pkgutil

import analyzer.checks
from analyzer.checks import KINDS
from analyzer.model.findings import Kind
from analyzer.waitfor.semantics import WaitKey
from traceformat.format import Mode
from traceformat.ops import (
    COLLECTIVE,
    COLLECTIVE_OPS,
    GATHER_OPS,
    GROUP_OPS,
    IN_PLACE_OPS,
    OPS,
    P2P_OPS,
    ROOTED_OPS,
    SCATTER_OPS,
    UNEVEN_OPS,
    names,
)


def test_op_table():
    assert GATHER_OPS == {
        "all_gather",
        "all_gather_coalesced",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "all_gather_v",
    }
    assert SCATTER_OPS == {
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "reduce_scatter_v",
    }
    assert UNEVEN_OPS == {"all_gather_v", "reduce_scatter_v"}
    assert ROOTED_OPS == {"broadcast", "reduce", "gather", "scatter"}
    assert IN_PLACE_OPS == {"all_reduce", "all_reduce_coalesced", "broadcast", "reduce"}
    assert P2P_OPS == {"send", "recv"} and GROUP_OPS == {"init_process_group", "new_group", "split_group"}
    assert len(COLLECTIVE_OPS) == 18 and not COLLECTIVE_OPS & (P2P_OPS | GROUP_OPS)
    # the list forms agree on their per-member side: all_gather's outputs, reduce_scatter's inputs
    assert names(kind=COLLECTIVE, agree="out") == (
        "all_gather",
        "all_gather_v",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "scatter",
    )
    assert names(kind=COLLECTIVE, agree="") == ("all_to_all", "all_to_all_single", "barrier")
    assert names(flat=True, coalesced=True) == ("all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced")
    assert OPS["wait"].kind == "wait" and OPS["mesh"].kind == OPS["redistribute"].kind == "marker"


def test_wait_keys():
    send = WaitKey.of({"op": "send", "group": 2, "seq": 5, "peer": 3}, rank=1)
    recv = WaitKey.of({"op": "recv", "group": 2, "seq": 5, "peer": 1}, rank=3)
    coll = WaitKey.of({"op": "all_reduce", "group": 0, "seq": 7, "peer": -1}, rank=4)
    assert send.partner() == recv and recv.partner() == send and send != recv
    assert (send.peer(), recv.peer()) == (3, 1) and coll.collective and not send.collective
    groups = {0: {"label": "dp", "ranks": [0, 4]}, 2: {"label": "pp", "ranks": [1, 3]}}
    assert coll.text(groups, "all_reduce") == "all_reduce #7 on dp (ranks 0,4)"
    assert send.text(groups) == "send #5 1->3 on pp (ranks 1,3)"
    assert recv.text(groups, arrow="→", label_only=True) == "recv #5 1→3 on pp"


def test_finding_kinds_are_declared_by_their_emitters():
    # every Kind declared at the top of a check module (and hang's) is listed in KINDS, once
    modules = [
        importlib.import_module(m.name) for m in pkgutil.iter_modules(analyzer.checks.__path__, "analyzer.checks.")
    ]
    declared = {id(v): v for m in [*modules, importlib.import_module("analyzer.hang")] for v in vars(m).values()}
    kinds = [v for v in declared.values() if isinstance(v, Kind)]
    assert sorted(k.name for k in kinds) == sorted(KINDS) and all(KINDS[k.name] is k for k in kinds)
    blocking = {k for k, v in KINDS.items() if v.blocks}
    assert blocking == {
        "missing_collective",
        "unmatched_p2p",
        "deadlock_cycle",
        "missing_rank",
        "failed_rank",
        "stalled_rank",
    }
    assert set(KINDS) == blocking | {
        "op_mismatch",
        "dtype_mismatch",
        "reduce_op_mismatch",
        "root_mismatch",
        "shape_mismatch",
        "split_mismatch",
        "p2p_mismatch",
        "group_mismatch",
        "replica_divergence",
        "numerics_divergence",
        "parameter_mismatch",
    }
    assert {k for k, v in KINDS.items() if not v.majority} == {
        "numerics_divergence",
        "parameter_mismatch",
        "missing_collective",
        "group_mismatch",
        "failed_rank",
        "missing_rank",
    }
    assert all(v.severity == "error" and v.about for v in KINDS.values())


def test_modes():
    assert [m.value for m in Mode if m.dry_run] == ["fake", "local"]
    assert Mode.of("flight_recorder") is Mode.FLIGHT_RECORDER and Mode.of("real-run") is None
