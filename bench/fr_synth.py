"""Synthetic healthy Flight Recorder dumps, in FR's own pickle format (what
`torch._C._distributed_c10d._dump_fr_trace` returns), for the fr_trace comparison at scale.

    python bench/fr_synth.py OUT_DIR --ranks 1024 --entries 2000 [--kind realistic|simple]

An FSDP x TP step pattern on dp x tp ranks (tp=8): per layer an all-gather on the rank's dp group,
two all-reduces on its tp group, a reduce-scatter on dp, as NCCL names them. Entries look like a
real NCCL dump (version 2.10, every key FR writes, 4 frames per entry that share their frame
dicts per call site as FR's pickler does, a filled pg_config and pg_status), so that both readers
pay their real cost. Torch-free: it writes pickles with the standard library.
"""

from __future__ import annotations

import argparse
import os
import pickle
import time


def _frames(k: int) -> list[dict]:
    return [
        {"name": "all_reduce", "filename": "/opt/torch/distributed/distributed_c10d.py", "line": 3245},
        {"name": "wrapper", "filename": "/opt/torch/distributed/c10d_logger.py", "line": 83},
        {"name": "forward", "filename": "/home/u/train/model.py", "line": 40 + 10 * k},
        {"name": "main", "filename": "/home/u/train/train.py", "line": 12},
    ]


def groups(ranks: int, tp: int = 8) -> tuple[dict, dict[int, list[tuple[str, str, int]]]]:
    """pg_config (same on every rank) and each rank's (name, desc, pg_id) of world, tp, dp."""
    dp = ranks // tp
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
    for t in range(dp):
        config[str(1 + t)] = {"name": str(1 + t), "desc": "mesh_tp", "ranks": str(list(range(t * tp, (t + 1) * tp)))}
    for d in range(tp):
        config[str(1 + dp + d)] = {"name": str(1 + dp + d), "desc": "mesh_dp", "ranks": str(list(range(d, ranks, tp)))}
    mine = {
        r: [("0", "default_pg", 0), (str(1 + r // tp), "mesh_tp", 1), (str(1 + dp + r % tp), "mesh_dp", 2)]
        for r in range(ranks)
    }
    return config, mine


def dump(rank: int, ranks: int, entries: int, config: dict, mine: list, tp: int = 8, kind: str = "realistic") -> bytes:
    dp = ranks // tp
    frames = [_frames(k) for k in range(4)]
    # (profiling name, group index into `mine`, input sizes, output sizes)
    pattern = [
        ("nccl:_all_gather_base", 2, [1024], [1024 * dp]),
        ("nccl:all_reduce", 1, [4, 512], [4, 512]),
        ("nccl:all_reduce", 1, [4, 512], [4, 512]),
        ("nccl:_reduce_scatter_base", 2, [1024 * dp], [1024]),
    ]
    if kind == "simple":  # one group (the world), all-reduces from 4 call sites: DDP-like
        pattern = [("nccl:all_reduce", 0, [1024 * (k + 1)], [1024 * (k + 1)]) for k in range(4)]
    seqs = [0, 0, 0]
    out = []
    for i in range(entries):
        name, g, ins, outs = pattern[i % 4]
        pg_name, desc, pg_id = mine[g]
        seqs[g] += 1
        out.append(
            {
                "frames": [frames[i % 4][j] for j in range(4)],
                "record_id": i,
                "pg_id": pg_id,
                "process_group": (pg_name, desc),
                "thread_name": "pt_main_thread",
                "thread_id": "139",
                "collective_seq_id": seqs[g],
                "p2p_seq_id": 0,
                "op_id": seqs[g],
                "profiling_name": name,
                "time_created_ns": 1_700_000_000_000_000_000 + i * 1000,
                "input_sizes": [list(ins)],
                "input_dtypes": ["BFloat16"],
                "output_sizes": [list(outs)],
                "output_dtypes": ["BFloat16"],
                "state": "completed",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": True,
                "timeout_ms": 600000,
                "is_p2p": False,
                "duration_ms": None,
            }
        )
    status = {
        str(pg_id): {"last_enqueued_collective": s, "last_started_collective": s, "last_completed_collective": s}
        for (_, _, pg_id), s in zip(mine, seqs)
    }
    return pickle.dumps(
        {"version": "2.10", "pg_config": config, "pg_status": status, "comm_lib_version": "2.26.6", "entries": out},
        protocol=2,
    )


def generate(out_dir: str, ranks: int, entries: int, kind: str = "realistic") -> None:
    """kind: "realistic" (FSDP x TP over world, tp and dp groups) or "simple" (one group)."""
    os.makedirs(out_dir, exist_ok=True)
    config, mine = groups(ranks)
    if kind == "simple":
        config = {"0": config["0"]}
    for r in range(ranks):
        with open(os.path.join(out_dir, f"rank_{r}"), "wb") as f:
            f.write(dump(r, ranks, entries, config, mine[r] if kind != "simple" else mine[r][:1], kind=kind))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--entries", type=int, default=2000)
    p.add_argument("--kind", choices=("realistic", "simple"), default="realistic")
    a = p.parse_args()
    t = time.perf_counter()
    generate(a.out_dir, a.ranks, a.entries, a.kind)
    print(f"{a.ranks} dumps x {a.entries} entries in {a.out_dir} ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
