"""Real PyTorch Flight Recorder dumps from seeded bugs: N gloo ranks on CPU, one folder per case
and form.

    python tests/flight_recorder/make_dumps.py OUT_DIR [--cases healthy,size,...] [--world 4]

For each case, OUT_DIR/CASE/ gets three folders: `pickle/` (what `_dump_fr_trace` returns, raw:
gloo's empty pg_config, files `rank_R`), `json/` (`_dump_fr_trace_json`, files
`trace_nodeNN_R.json`), `repaired/` (the pickle with pg_config filled in from the groups the
rank is a member of, as NCCL writes it, files `rank_R.pkl`).

Every case warms up the same way (all-reduces, an all-gather that shows the world size, a DTensor
redistribute on a 2 x 2 mesh), then issues its faulty step with async_op=True and dumps *before*
wait(), so a step that hangs still leaves a dump; a short process-group timeout ends the wait.
`mesh` dumps after the timeout instead (gloo's pg_status then counts the timed-out collective as
its last completed one, as a watchdog's dump would show).
Ranks are forked from this process (torch imported once), not spawned.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from datetime import timedelta

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

CASES = ("healthy", "size", "op", "skip", "dead", "cycle", "mesh")
TIMEOUT = timedelta(seconds=3)  # the seeded hang's: groups made for a case, and every final wait
WORLD_TIMEOUT = timedelta(seconds=120)  # the warm-up on the world group survives a loaded machine


def _groups_of(rank: int, groups: list) -> dict:
    """pg_config as NCCL writes it: the groups this rank is a member of."""
    out = {}
    for pg in groups:
        ranks = dist.get_process_group_ranks(pg)
        if rank in ranks:
            name = pg.group_name
            out[name] = {"name": name, "desc": pg.group_desc, "ranks": str(ranks)}
    return out


def _dump(out: str, rank: int, groups: list) -> None:
    raw = torch._C._distributed_c10d._dump_fr_trace(True, True, False)
    js = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
    for sub in ("pickle", "json", "repaired"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    with open(os.path.join(out, "pickle", f"rank_{rank}"), "wb") as f:
        f.write(raw)
    with open(os.path.join(out, "json", f"trace_node{rank // 2:02d}_{rank}.json"), "wb") as f:
        f.write(js if isinstance(js, bytes) else js.encode())
    dump = pickle.loads(raw)
    dump["pg_config"] = _groups_of(rank, groups)
    with open(os.path.join(out, "repaired", f"rank_{rank}.pkl"), "wb") as f:
        pickle.dump(dump, f)


def _warmup(rank: int, world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    t = torch.ones(4)
    for _ in range(2):
        dist.all_reduce(t)
    out = torch.empty(4 * world)
    dist.all_gather_into_tensor(out, t)
    dist.all_gather([torch.empty(4) for _ in range(world)], t)
    dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world))
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    x = distribute_tensor(torch.ones(5, 4), mesh["tp"], [Shard(0)])  # uneven shards: 3 + 2 rows
    x.redistribute(mesh["tp"], [Replicate()])
    p = DTensor.from_local(torch.ones(4, 4), mesh["dp"], [Partial()])
    p.redistribute(mesh["dp"], [Shard(0)])
    p.redistribute(mesh["dp"], [Replicate()])
    dist.broadcast(t, 0)
    return [dist.group.WORLD, mesh.get_group("dp"), mesh.get_group("tp")]


def _faulty(case: str, rank: int, world: int, groups: list, out: str) -> list:
    """Issue the case's last step asynchronously; returns the works to wait on."""
    t = torch.ones(4)
    if case == "healthy":
        return [dist.all_reduce(t, async_op=True)]
    if case == "size":  # rank 2's tensor is one element longer
        return [dist.all_reduce(torch.ones(5 if rank == 2 else 4), async_op=True)]
    if case == "op":  # rank 1 broadcasts where the others all-reduce
        return [dist.broadcast(t, 0, async_op=True) if rank == 1 else dist.all_reduce(t, async_op=True)]
    if case == "skip":  # rank 2 skips the first of two all-reduces
        works = [] if rank == 2 else [dist.all_reduce(t, async_op=True)]
        return works + [dist.all_reduce(torch.ones(4), async_op=True)]
    if case == "dead":  # rank 3 all-reduces in float64, then its process dies before dumping
        if rank == 3:
            # let the others issue and dump first: float64 bytes arriving at a float32 peer make
            # gloo abort that process, which would otherwise race its dump
            done = [os.path.join(out, "repaired", f"rank_{r}.pkl") for r in range(world) if r != 3]
            deadline = time.monotonic() + 60
            while not all(os.path.exists(p) for p in done) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the last file is complete once its rank moved on to wait()
            dist.all_reduce(torch.ones(4, dtype=torch.float64), async_op=True)
            os._exit(1)
        return [dist.all_reduce(t, async_op=True)]
    if case == "cycle":  # rank r enters group (r, r+1) first, (r-1, r) second: a 4-rank wait cycle
        ring = groups[3:]
        return [dist.all_reduce(t, group=ring[rank], async_op=True)]
    if case == "mesh":  # 2 x 2 mesh: ranks 0, 3 enter tp first, 1, 2 dp first: 0 -> 1 -> 3 -> 2 -> 0
        dp, tp = groups[3:]
        return [dist.all_reduce(t, group=tp if rank in (0, 3) else dp, async_op=True)]
    raise ValueError(case)


def _rank(rank: int, world: int, case: str, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=WORLD_TIMEOUT)
    groups = _warmup(rank, world)
    if case == "cycle":  # ring groups {r, r+1}, each warmed up by its members
        ring = [dist.new_group([r, (r + 1) % world], timeout=TIMEOUT) for r in range(world)]
        for r, pg in enumerate(ring):
            if rank in (r, (r + 1) % world):
                dist.all_reduce(torch.ones(2), group=pg)
        groups += ring
    if case == "mesh":  # the mesh's dp and tp groups again, with the short timeout that ends the hang
        dp = [dist.new_group(r, timeout=TIMEOUT) for r in ([0, 2], [1, 3])]
        tp = [dist.new_group(r, timeout=TIMEOUT) for r in ([0, 1], [2, 3])]
        mine = [dp[rank % 2], tp[rank // 2]]
        for pg in mine:
            dist.all_reduce(torch.ones(2), group=pg)
        groups += mine
    works = _faulty(case, rank, world, groups, out)
    if case != "mesh":
        _dump(out, rank, groups)
    for w in works:
        try:
            w.wait(TIMEOUT)  # the world group's timeout is long (warm-up): bound the wait here
        except Exception:  # the seeded bug: a timeout or a closed connection
            pass
    if case == "mesh":  # dumped after the timeout, as a watchdog does: pg_status counts the errored op
        _dump(out, rank, groups)
        # stay until every rank dumped: a peer's exit closes connections it may still time out on
        done = [os.path.join(out, "repaired", f"rank_{r}.pkl") for r in range(world)]
        deadline = time.monotonic() + 60
        while not all(os.path.exists(p) for p in done) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    os._exit(0)  # no destroy_process_group: peers may be gone or stuck


def make(out_dir: str, cases=CASES, world: int = 4, port: int = 29700) -> None:
    for i, case in enumerate(cases):
        out = os.path.join(out_dir, case)
        ctx = mp.start_processes(_rank, args=(world, case, out, port + i), nprocs=world, join=False,
                                 start_method="fork")
        for p in ctx.processes:
            p.join(60)
            if p.is_alive():
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--port", type=int, default=29700)
    a = ap.parse_args()
    make(a.out_dir, a.cases.split(","), a.world, a.port)
    print(f"dumps in {a.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
