"""FR dumps written by hand in FR's format (no torch): NCCL p2p names, pg_config with split
groups, ring buffers that wrapped, older dump versions."""

import os
import pickle
import sys

import polars as pl
from conftest import REPO

from analyzer.checks import run_checks
from analyzer.loader import load

sys.path.insert(0, os.path.join(REPO, "bench"))
from fr_synth import dump, groups  # noqa: E402


def _write(folder, dumps: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    for rank, d in dumps.items():
        with open(os.path.join(folder, f"rank_{rank}"), "wb") as f:
            f.write(d if isinstance(d, bytes) else pickle.dumps(d))


def test_synthetic_healthy_scale_pattern_is_clean(tmp_path):
    config, mine = groups(16)
    _write(tmp_path, {r: dump(r, 16, 200, config, mine[r]) for r in range(16)})
    t = load(tmp_path)
    assert t.events.height == 16 * 200 and t.groups.height == 1 + 2 + 8
    assert run_checks(t).findings == []


def test_wrapped_ring_buffers_are_aligned(tmp_path):
    config, mine = groups(16)
    dumps = {r: pickle.loads(dump(r, 16, 200, config, mine[r])) for r in range(16)}
    dumps[5]["entries"] = dumps[5]["entries"][40:]  # rank 5's buffer wrapped: older entries gone
    _write(tmp_path, dumps)
    t = load(tmp_path)
    assert run_checks(t).findings == [] and any("ring buffers wrapped" in n for n in t.notes)


def _entry(rid, name, pg, seq, p2p, ins, outs, dtype="Float", state="completed"):
    return {
        "record_id": rid,
        "pg_id": 0,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p,
        "op_id": rid + 1,
        "profiling_name": name,
        "time_created_ns": rid,
        "input_sizes": ins,
        "output_sizes": outs,
        "input_dtypes": [dtype] if ins else [],
        "output_dtypes": [dtype] if outs else [],
        "state": state,
        "frames": [],
        "is_p2p": "send" in name or "recv" in name,
    }


def test_nccl_p2p_matched_per_pair_and_mismatch_found(tmp_path):
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    pg = ("0", "default_pg")
    r0 = [
        _entry(0, "nccl:all_reduce", pg, 1, 0, [[4]], [[4]]),
        _entry(1, "nccl:send 0->1", pg, 1, 1, [[8]], [[8]]),
        _entry(2, "nccl:recv 0<-1", pg, 1, 2, [[2]], [[2]]),
    ]
    r1 = [
        _entry(0, "nccl:all_reduce", pg, 1, 0, [[4]], [[4]]),
        _entry(1, "nccl:recv 1<-0", pg, 1, 1, [[8]], [[8]]),
        _entry(2, "nccl:send 1->0", pg, 1, 2, [[3]], [[3]]),
    ]
    _write(
        tmp_path,
        {r: {"version": "2.10", "pg_config": cfg, "pg_status": {}, "entries": e} for r, e in enumerate([r0, r1])},
    )
    t = load(tmp_path)
    sends = t.events.filter(pl.col("op") == "send").select("rank", "peer", "seq").rows()
    assert sorted(sends) == [(0, 1, 0), (1, 0, 0)]
    assert [(f.kind.name, f.culprit_ranks) for f in run_checks(t).findings] == [("p2p_mismatch", [0, 1])]


def test_old_version_without_seq_names_or_process_group(tmp_path):
    entries = [
        {
            "record_id": i,
            "pg_id": 0,
            "seq_id": i + 1,
            "profiling_name": "nccl:all_reduce",
            "input_sizes": [[4]],
            "output_sizes": [[4]],
            "state": "completed",
            "time_created_ns": i,
        }
        for i in range(3)
    ]
    _write(tmp_path, {r: {"version": "1.5", "pg_config": {}, "entries": entries} for r in range(2)})
    t = load(tmp_path)
    assert t.events["seq"].to_list() == [0, 1, 2, 0, 1, 2] and t.groups["ranks"].to_list() == [[0, 1]]
    assert run_checks(t).findings == []
