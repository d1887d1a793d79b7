"""The peer corpus: Flight Recorder dump folders written by hand in the format ProcessGroupNCCL
and gloo write (pickles, one `rank_R` file per rank), with the verdict each case should get.

    python tests/flight_recorder/corpus.py OUT_DIR          # one folder per case

Cases: every scenario of PyTorch's test/distributed/flight_recorder/test_fr_analysis.py
(`fra_*`, 2 ranks, with real sequence numbers where the test leaves them 0), NCCL hang shapes
and conventions (`nccl_*`, `fsdp_*`), and gloo's pg_status counting a timed-out collective as
completed (`gloo_*`). Entries carry every key a 2.10 dump has. Torch-free.

CASES maps a case to (its dumps {rank: dump}, expected `check` [(kind, culprits)], expected
`hang` root causes [(kind, culprits)], None where not asserted).
"""

from __future__ import annotations

import os
import pickle
import sys

DEFAULT = ("0", "default_pg")


def entry(rid: int, name: str, seq: int, ins, outs, state="completed", pg=DEFAULT, p2p_seq=0, dtype="Float",
          out_dtype=None, backend="nccl", pg_id=0) -> dict:
    p2p = name.startswith(("send", "recv"))
    marker = name in ("coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced")
    return {"record_id": rid, "pg_id": pg_id, "process_group": pg, "collective_seq_id": seq, "p2p_seq_id": p2p_seq,
            "op_id": rid + 1, "profiling_name": f"{backend}:{name}", "time_created_ns": 1_000_000 * (rid + 1),
            "input_sizes": ins, "output_sizes": outs,
            "input_dtypes": [] if marker else [dtype] * len(ins),
            "output_dtypes": [] if marker else [out_dtype or dtype] * len(outs), "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": state == "completed",
            "timeout_ms": 600000, "is_p2p": p2p, "duration_ms": None, "thread_name": "pt_main_thread",
            "thread_id": "1", "frames": []}


def config(world: int, *extra: tuple[str, str, list[int]]) -> dict:
    out = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
    for name, desc, ranks in extra:
        out[name] = {"name": name, "desc": desc, "ranks": str(ranks)}
    return out


def dumps(per_rank: dict[int, list], cfg, status=None) -> dict[int, dict]:
    return {r: {"version": "2.10", "rank": r, "pg_config": cfg(r) if callable(cfg) else cfg,
                "pg_status": status(r) if callable(status) else (status or {}), "comm_lib_version": "2.26.6",
                "entries": [dict(e, record_id=i, op_id=i + 1) if "keep_rid" not in e else e
                            for i, e in enumerate(es)]}
            for r, es in per_rank.items()}


def _fra(per_rank: dict[int, list]) -> dict[int, dict]:
    """test_fr_analysis.py's two ranks: default_pg [0, 1] and a one-rank sub_pg per rank."""
    return dumps(per_rank, lambda r: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                                      "1": {"name": "1", "desc": "sub_pg", "ranks": f"[{r}]"}})


def _both(*es):
    return {0: list(es), 1: list(es)}


SUB = ("1", "sub_pg")
A44 = [[4, 4]]


def fra_cases() -> dict:
    out = {}
    out["fra_allreduce_matched"] = (_fra(_both(entry(0, "all_reduce", 1, A44, A44),
                                               entry(1, "all_reduce", 1, [[5, 5]], [[5, 5]], pg=SUB))), [], [])
    out["fra_allreduce_coalesced"] = (_fra(_both(entry(0, "allreduce_coalesced", 1, A44, A44))), [], [])
    out["fra_broadcast_coalesced_slow_path"] = (_fra(_both(
        entry(0, "broadcast", 1, A44, A44), entry(1, "broadcast", 1, A44, A44), entry(2, "coalesced", 1, [[]], [[]]))),
        [], [])
    r0 = [entry(0, "_broadcast_oop", 1, A44, A44), entry(1, "_broadcast_oop", 1, [[5, 5]], [[5, 5]]),
          entry(2, "ALLGATHER_coalesced", 1, [[]], [[]])]
    r1 = [entry(0, "_broadcast_oop", 1, A44, A44), entry(1, "_broadcast_oop", 1, A44, A44),
          entry(2, "ALLGATHER_coalesced", 1, [[]], [[]])]
    out["fra_uneven_allgather_mismatch"] = (_fra({0: r0, 1: r1}), [("shape_mismatch", [0, 1])], [])
    out["fra_uneven_reduce_scatter"] = (_fra(_both(
        entry(0, "_reduce_oop", 1, A44, A44), entry(1, "_reduce_oop", 1, A44, A44),
        entry(2, "REDUCE_SCATTER_coalesced", 1, [[]], [[]]))), [], [])
    # rank 1 went on into a coalesced block rank 0 never entered (still running its all_reduce)
    out["fra_coalesced_block_only_on_rank_1"] = (_fra({
        0: [entry(0, "all_reduce", 1, A44, A44, state="started")],
        1: [entry(0, "all_reduce", 1, A44, A44), entry(1, "_reduce_oop", 2, A44, A44, state="started"),
            entry(2, "_reduce_oop", 2, A44, A44, state="scheduled"),
            entry(3, "REDUCE_SCATTER_coalesced", 2, [[]], [[]], state="scheduled")]}),
        [("missing_collective", [0])], [("stalled_rank", [0])])
    # match_one_event's verdicts, one dump folder each (2 ranks, one all_reduce #1)
    out["fra_event_size_mismatch"] = (_fra({0: [entry(0, "all_reduce", 1, A44, A44)],
                                            1: [entry(0, "all_reduce", 1, [[5, 4]], [[4, 4]])]}),
                                      [("shape_mismatch", [1])], [])
    out["fra_event_output_size_mismatch"] = (_fra({0: [entry(0, "all_reduce", 1, A44, A44)],
                                                   1: [entry(0, "all_reduce", 1, A44, [[5, 4]])]}),
                                             [("shape_mismatch", [1])], [])
    out["fra_event_type_mismatch"] = (_fra({0: [entry(0, "all_reduce", 1, A44, A44)],
                                            1: [entry(0, "all_gather", 1, A44, [[8, 4]])]}),
                                      [("op_mismatch", [0, 1])], [])
    out["fra_event_dtype_mismatch"] = (_fra({0: [entry(0, "all_reduce", 1, A44, A44)],
                                             1: [entry(0, "all_reduce", 1, A44, A44, out_dtype="Half")]}),
                                       [("dtype_mismatch", [1])], [])
    out["fra_event_state_mismatch"] = (_fra({0: [entry(0, "all_reduce", 1, A44, A44, state="scheduled")],
                                             1: [entry(0, "all_reduce", 1, A44, A44)]}), [], [])
    out["fra_gather_root_output"] = (_fra({0: [entry(0, "gather", 1, A44, [[4, 4], [4, 4]])],
                                           1: [entry(0, "gather", 1, A44, [[]])]}), [], [])
    return out


def _ring(world: int, n: int, stop: dict[int, tuple[int, str]] | None = None) -> dict[int, list]:
    """n all_reduces #1..#n on the default group; stop[r] = (last seq rank r issued, its state)."""
    out = {}
    for r in range(world):
        last, state = (stop or {}).get(r, (n, "completed"))
        out[r] = [entry(i, "all_reduce", i + 1, [[1024]], [[1024]],
                        state=state if i + 1 == last else "completed") for i in range(last)]
    return out


def nccl_cases() -> dict:
    out = {}
    # rank 0 still `started` in #5 (its GPU stuck); the others completed #5 and wait in #6
    per = _ring(4, 6, {0: (5, "started"), 1: (6, "started"), 2: (6, "started"), 3: (6, "started")})
    out["nccl_rank_stuck_started"] = (dumps(per, config(4)), [("missing_collective", [0])],
                                      [("stalled_rank", [0])])
    # a dump taken while every rank was in #3 (a healthy job, or stuck inside NCCL): nobody waits
    per = _ring(4, 3, {r: (3, "started") for r in range(4)})
    out["nccl_all_in_flight"] = (dumps(per, config(4)), [], [])
    # a rank that died: no dump; the others are stuck `started` in #4
    per = _ring(4, 4, {r: (4, "started") for r in range(3)})
    del per[3]
    out["nccl_missing_dump"] = (dumps(per, config(4)), [("missing_rank", [3])], [("stalled_rank", [3])])
    # ring buffers wrapped at different points: rank r kept only entries from record 3 r on
    per = _ring(4, 40)
    for r in range(4):
        per[r] = [dict(e, keep_rid=True) for e in per[r][3 * r:]]
    out["nccl_wrapped_record_id_skew"] = (dumps(per, config(4)), [], [])
    per = _ring(4, 40)
    per[2][30]["input_sizes"] = per[2][30]["output_sizes"] = [[1000]]
    for r in range(4):
        per[r] = [dict(e, keep_rid=True) for e in per[r][5 * r:]]
    out["nccl_wrapped_size_mismatch"] = (dumps(per, config(4)), [("shape_mismatch", [2])], [])
    # two groups over ranks 0 and 1, entered in opposite orders: each rank `started` in a different
    # group's collective, the other's `scheduled` behind it. Every member issued every op.
    ga, gb = ("1", "grp_a"), ("2", "grp_b")
    cfg = config(2, ("1", "grp_a", [0, 1]), ("2", "grp_b", [0, 1]))
    per = {0: [entry(0, "all_reduce", 1, [[8]], [[8]]), entry(1, "all_reduce", 1, [[8]], [[8]], "started", ga, pg_id=1),
               entry(2, "all_reduce", 1, [[8]], [[8]], "scheduled", gb, pg_id=2)],
           1: [entry(0, "all_reduce", 1, [[8]], [[8]]), entry(1, "all_reduce", 1, [[8]], [[8]], "started", gb, pg_id=2),
               entry(2, "all_reduce", 1, [[8]], [[8]], "scheduled", ga, pg_id=1)]}
    out["nccl_swapped_groups"] = (dumps(per, cfg), [("deadlock_cycle", [0, 1])], [("deadlock_cycle", [0, 1])])
    out.update(_pipelines())
    out.update(_coalesced())
    # list reduce_scatter (flattened by NCCL), uneven _v collectives, _base ops
    per = {r: [entry(0, "reduce_scatter", 1, [[4 * 8, 2]], [[8, 2]]), entry(1, "_reduce_scatter_base", 2, [[32]], [[8]]),  # noqa: E501
               entry(2, "_all_gather_base", 3, [[8]], [[32]]), entry(3, "all_gather", 4, [[8]], [[32]]),
               entry(4, "all_gather_v", 5, [[r + 1]], [[1], [2], [3], [4]]),
               entry(5, "reduce_scatter_v", 6, [[1], [2], [3], [4]], [[r + 1]]),
               entry(6, "_broadcast_oop", 7, [[6]], [[6]]), entry(7, "_reduce_oop", 8, [[6]], [[6]])]
           for r in range(4)}
    out["nccl_list_v_base_oop_ops"] = (dumps(per, config(4)), [], [])
    # output side: rank 1's all_reduce writes a longer output, rank 3's a float16 one
    per = _ring(4, 3)
    per[1][1]["output_sizes"] = [[1025]]
    per[3][2]["output_dtypes"] = ["Half"]
    out["nccl_output_side_mismatch"] = (dumps(per, config(4)), [("shape_mismatch", [1]), ("dtype_mismatch", [3])],
                                        [])
    return out


def _pipelines() -> dict:
    out = {}
    cfg = config(4)

    def s(rid, src, dst, p2p, state="completed"):
        return entry(rid, f"send {src}->{dst}", 0, [[16]], [[16]], state, p2p_seq=p2p)

    def rv(rid, dst, src, p2p, state="completed"):
        return entry(rid, f"recv {dst}<-{src}", 0, [[16]], [[16]], state, p2p_seq=p2p)

    # 4 stages, 3 micro-batches: rank 3 never posts its first recv (stuck in compute). Rank 2 is
    # `started` in its send to 3; ranks 1 and 0 in sends whose recvs are `scheduled` behind it
    per = {0: [entry(0, "all_reduce", 1, [[4]], [[4]]), s(1, 0, 1, 1), s(2, 0, 1, 2), s(3, 0, 1, 3, "started")],
           1: [entry(0, "all_reduce", 1, [[4]], [[4]]), rv(1, 1, 0, 1), s(2, 1, 2, 2), rv(3, 1, 0, 3),
               s(4, 1, 2, 4, "started"), rv(5, 1, 0, 5, "scheduled")],
           2: [entry(0, "all_reduce", 1, [[4]], [[4]]), rv(1, 2, 1, 1), s(2, 2, 3, 2, "started"),
               rv(3, 2, 1, 3, "scheduled")],
           3: [entry(0, "all_reduce", 1, [[4]], [[4]])]}
    # the cause is rank 3, which is in no op at all: rank 2's send is unmatched only because rank 3
    # never got to its recv; ranks 0-2 are stuck behind it (check: the recv rank 3 never posted)
    out["nccl_pipeline_started_p2p"] = (dumps(per, cfg), [("unmatched_p2p", [3])], [("stalled_rank", [3])])
    # rank 2 sends its activations to rank 0 instead of rank 3 (NCCL: `started`, never completes,
    # rank 0 posts no recv); rank 3 waits in its recv from 2. Rank 0 is idle, not the cause: one
    # fix on rank 2 (send to 3) matches both unmatched ops
    per = {0: [entry(0, "all_reduce", 1, [[4]], [[4]]), s(1, 0, 1, 1)],
           1: [entry(0, "all_reduce", 1, [[4]], [[4]]), rv(1, 1, 0, 1), s(2, 1, 2, 2)],
           2: [entry(0, "all_reduce", 1, [[4]], [[4]]), rv(1, 2, 1, 1), s(2, 2, 0, 2, "started")],
           3: [entry(0, "all_reduce", 1, [[4]], [[4]]), rv(1, 3, 2, 1, "started")]}
    out["nccl_pipeline_wrong_peer"] = (dumps(per, cfg), [("unmatched_p2p", [2])], [("unmatched_p2p", [2])])
    return out


def _coalesced() -> dict:
    """FSDP-style all-gathers of 3 parameters in one coalesced block, then a reduce-scatter block."""
    out = {}

    def step(rid, seq, sizes):
        es = [entry(rid + i, "_all_gather_base", seq, [[n]], [[4 * n]]) for i, n in enumerate(sizes)]
        es.append(entry(rid + 3, "ALLGATHER_coalesced", seq, [[]], [[]]))
        es += [entry(rid + 4 + i, "_reduce_scatter_base", seq + 1, [[4 * n]], [[n]]) for i, n in enumerate(sizes)]
        es.append(entry(rid + 7, "REDUCE_SCATTER_coalesced", seq + 1, [[]], [[]]))
        return es

    healthy = {r: [e for k in range(3) for e in step(8 * k, 2 * k + 1, [256, 64, 512])] for r in range(4)}
    out["fsdp_coalesced_healthy"] = (dumps(healthy, config(4)), [], [])
    uneven = {r: [e for k in range(3) for e in step(8 * k, 2 * k + 1, [256, 64 if r != 2 or k != 1 else 96, 512])]
              for r in range(4)}
    out["fsdp_coalesced_uneven"] = (dumps(uneven, config(4)), [("shape_mismatch", [2])] * 2, [])
    return out


def gloo_cases() -> dict:
    """gloo never updates an entry's state; its pg_status.last_completed_collective also counts a
    collective that ended in a timeout error. A 2 x 2 mesh (dp {0, 2} {1, 3}, tp {0, 1} {2, 3}):
    ranks 0, 3 enter tp first, ranks 1, 2 dp first: 0 -> 1 -> 3 -> 2 -> 0, every one timed out."""
    names = {0: ("1", "mesh_dp", 1), 1: ("2", "mesh_dp", 1), 2: ("1", "mesh_dp", 1), 3: ("2", "mesh_dp", 1)}
    tps = {0: ("3", "mesh_tp", 2), 1: ("3", "mesh_tp", 2), 2: ("4", "mesh_tp", 2), 3: ("4", "mesh_tp", 2)}
    per, status = {}, {}
    for r in range(4):
        dp, tp = names[r], tps[r]
        first = tp if r in (0, 3) else dp
        per[r] = [entry(0, "all_reduce", 1, [[4]], [[4]], "scheduled", backend="gloo", pg_id=0, pg=("0", "undefined")),
                  entry(1, "all_reduce", 1, [[4]], [[4]], "scheduled", backend="gloo", pg_id=1, pg=dp[:2]),
                  entry(2, "all_reduce", 1, [[4]], [[4]], "scheduled", backend="gloo", pg_id=2, pg=tp[:2]),
                  entry(3, "all_reduce", 2, [[4]], [[4]], "scheduled", backend="gloo", pg_id=first[2], pg=first[:2])]
        for e in per[r]:
            e["op_id"] = e["collective_seq_id"]
        status[r] = {"0": {"last_completed_collective": 1}, "1": {"last_completed_collective": 1 + (first == dp)},
                     "2": {"last_completed_collective": 1 + (first == tp)}}
    d = dumps(per, {"": {"name": "", "desc": "", "ranks": "[]"}}, lambda r: status[r])
    for r in d:  # entries keep the op_id gloo counts per group
        for e, src in zip(d[r]["entries"], per[r]):
            e["op_id"] = src["op_id"]
    return {"gloo_mesh_cross_group_timeout": (d, [("deadlock_cycle", [0, 1, 2, 3])],
                                              [("deadlock_cycle", [0, 1, 2, 3])])}


def cases() -> dict:
    return {**fra_cases(), **nccl_cases(), **gloo_cases()}


def write(out_dir: str, names=None) -> dict:
    """Write each case's dumps to OUT_DIR/CASE/rank_R; returns the cases written."""
    all_cases = cases()
    chosen = {k: v for k, v in all_cases.items() if names is None or k in names}
    for name, (per, _, _) in chosen.items():
        folder = os.path.join(out_dir, name)
        os.makedirs(folder, exist_ok=True)
        for r, d in per.items():
            d = {k: v for k, v in d.items()}
            d["entries"] = [{k: v for k, v in e.items() if k != "keep_rid"} for e in d["entries"]]
            with open(os.path.join(folder, f"rank_{r}"), "wb") as f:
                pickle.dump(d, f, protocol=2)
    return chosen


if __name__ == "__main__":
    write(sys.argv[1])
    print(f"{len(cases())} cases in {sys.argv[1]}", file=sys.stderr)
