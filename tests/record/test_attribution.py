"""The recorded frame is the innermost frame outside torch, commtrace and the standard library,
wherever it lives: a training library installed in site-packages included; the user frame is
the innermost frame of the program's own code (the analyzer shows both: user's line first)."""

import os
import shutil
import sysconfig

import pytest
import torch
import typing_extensions
from conftest import PROGRAMS, REPO, program, stream

from analyzer.checks import run_checks
from analyzer.loader import load
from tracer.capture.code_paths import is_user_path


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_frames_inside_an_installed_library(tmp_path, mode):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    site = tmp_path / "lib" / "python3.11" / "site-packages"
    shutil.copytree(os.path.join(PROGRAMS, "installed_lib", "ddptrain"), site / "ddptrain")
    out = str(tmp_path / "lib.trace")
    res = record(
        RecordRequest(
            program=Program(script=program("launch_installed"), args=[str(site)]),
            world_size=2,
            out=out,
            mode=mode,
            progress=False,
        )
    )
    assert res.errors == {}
    t = load(out)
    launch = "tests/programs/launch_installed.py:9 in <module>"  # main(): the program's own line
    for rank in range(2):
        assert {e["user_frame"] for e in stream(t, rank)} == {launch}
        frames = [(e["op"], e["frame"]) for e in stream(t, rank) if e["op"] != "wait"]
        assert all(f.startswith(launch + " via ddptrain/") for _, f in frames)  # the user's line first
        frames = [(op, f.removeprefix(launch + " via ")) for op, f in frames]
        ddp_init = [
            ("all_gather", "ddptrain/parallelize.py:6 in parallelize"),
            ("broadcast", "ddptrain/parallelize.py:6 in parallelize"),
            ("broadcast", "ddptrain/parallelize.py:6 in parallelize"),
        ]
        step = [
            ("all_reduce", "ddptrain/train.py:19 in main"),  # loss.backward(): DDP's bucket
            ("all_reduce", "ddptrain/train.py:9 in log_loss"),
        ]
        rebuild = [("broadcast", "ddptrain/train.py:18 in main")] * 2  # the forward of step 2
        assert frames == [("init_process_group", "ddptrain/train.py:13 in main"), *ddp_init, *step, *rebuild, *step]


def test_user_paths():
    torch_dir = os.path.dirname(torch.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    assert not is_user_path(os.path.join(torch_dir, "nn", "parallel", "distributed.py"))
    assert not is_user_path(os.path.join(os.path.dirname(torch_dir), "functorch", "__init__.py"))
    assert not is_user_path(os.path.join(stdlib, "runpy.py"))
    assert not is_user_path(typing_extensions.__file__)  # torch's own calls go through its wrappers
    assert not is_user_path(os.path.join(REPO, "tracer", "capture", "process_group.py"))
    assert not is_user_path(os.path.join(REPO, "analyzer", "loader.py"))
    assert is_user_path(os.path.join(REPO, "tracer", "workloads", "train.py"))  # plays the user's program
    assert is_user_path(os.path.join(stdlib, "site-packages", "torchtitan", "train.py"))  # base interpreter's
    assert is_user_path(os.path.join(os.path.dirname(torch_dir), "torchtitan", "train.py"))
    assert is_user_path("/home/me/train.py")


# ---- the module that issued an op: its own forward hooks included --------------------------
def _record(tmp_path, name: str, mode: str, compute: str = "real"):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = str(tmp_path / f"{name}-{mode}-{compute}.trace")
    res = record(
        RecordRequest(
            program=Program(script=program(name)), world_size=4, out=out, mode=mode, compute=compute, progress=False
        )
    )
    assert res.errors == {}, res.errors
    return load(out)


COMM = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "scatter", "broadcast")
MODES = [("fake", "real"), ("local", "real"), ("fake", "fake")]


def _comm(t, rank):
    return [(e["op"], e["module"] or "", e["phase"], e["out_shapes"]) for e in stream(t, rank, COMM)]


@pytest.mark.parametrize("mode,compute", MODES)
def test_rowwise_output_all_reduce_is_filed_under_its_module(tmp_path, mode, compute):
    # tp_mlp.py (net1 Colwise, net2 Rowwise): parallelize_module scatters net1's weight (16x8 ->
    # 4x8) and bias (16 -> 4) and net2's weight (8x16 -> 8x4) from rank 0, broadcasts net2's
    # replicated bias; the forward's one collective is the all-reduce of net2's partial (4, 8)
    # output, issued by RowwiseParallel's output hook on net2: CommDebugMode files it under net2
    t = _record(tmp_path, "tp_mlp", mode, compute)
    setup = [("scatter", "", "other", s) for s in ([[4, 8]], [[4]], [[8, 4]])] + [("broadcast", "", "other", [[8]])]
    for rank in range(4):
        assert _comm(t, rank) == [*setup, ("all_reduce", "net2", "forward", [[4, 8]])]
    assert run_checks(t).findings == []


@pytest.mark.parametrize("mode,compute", MODES)
def test_every_tp_hook_files_its_collective_under_its_module(tmp_path, mode, compute):
    # tp_sequence.py on 4 ranks, x (2, 8, 8) sequence-sharded (2, 2, 8). Setup: block.net1
    # (16x8 -> 4x8), block.net2 (8x16 -> 8x4), head (16x8 -> 4x8) scattered; the norm's
    # replicated parameters are taken as they are (SequenceParallel: no collective).
    # Forward: block's PrepareModuleInput all-gathers the sequence (dim 1 through dim 0:
    # (8, 2, 8)) in block's pre-hook; the user's hook on block.net1 all-reduces a statistic;
    # block.net2's RowwiseParallel output hook reduce-scatters (8, 2, 8) -> (2, 2, 8); head's
    # ColwiseParallel input hook all-gathers again; the root's PrepareModuleOutput all-gathers
    # head's Shard(-1) output (2, 8, 4) -> (8, 8, 4) in the root's output hook (the root, in
    # forward: before, it was filed under no module, phase "other").
    # Backward, the module whose backward autograd entered last, its hooks' backward included:
    # head's input all-gather comes back as a reduce-scatter (head), net2's output
    # reduce-scatter as an all-gather (block.net2), block's input all-gather as a reduce-scatter
    # after net1's backward (block.net1).
    t = _record(tmp_path, "tp_sequence", mode, compute)
    seq, full = [[2, 2, 8]], [[8, 2, 8]]
    expected = [("scatter", "", "other", s) for s in ([[4, 8]], [[8, 4]], [[4, 8]])] + [
        ("all_gather_into_tensor", "block", "forward", full),
        ("all_reduce", "block.net1", "forward", [[1]]),
        ("reduce_scatter_tensor", "block.net2", "forward", seq),
        ("all_gather_into_tensor", "head", "forward", full),
        ("all_gather_into_tensor", "Model", "forward", [[8, 8, 4]]),
        ("reduce_scatter_tensor", "head", "backward", seq),
        ("all_gather_into_tensor", "block.net2", "backward", full),
        ("reduce_scatter_tensor", "block.net1", "backward", seq),
    ]
    for rank in range(4):
        assert _comm(t, rank) == expected
    assert run_checks(t).findings == []


# ---- module names by identity; the module of a backward op, as CommDebugMode decides it -----
class _Probe(torch.nn.Module):
    """Notes the module Attribution names where its forward runs."""

    def __init__(self, att, seen):
        super().__init__()
        self.att, self.seen = att, seen

    def forward(self, x):
        self.seen.append(self.att.where()[0])
        return x


def test_a_module_born_at_a_dropped_modules_id_gets_its_own_name():
    # a program builds, uses and drops a model per case (as the torch corpus does): a new module
    # may get a dropped one's id back (the corpus saw it once in three runs), and must not get
    # its name with it. Deterministic: Attribution keeps no dropped module alive and no name
    # under a dead module's id; then bare modules are allocated and one at a dropped id (CPython
    # hands a freed id out again, usually at once) is built and run; where the allocator gave
    # none back, a fresh one is (the assertions above already exclude the old bug).
    import gc
    import weakref

    from tracer.capture.attribution import Attribution

    class MLP(torch.nn.Module):
        def __init__(self, att, seen):
            super().__init__()
            self.att, self.seen = att, seen
            self.net1 = _Probe(att, seen)

        def forward(self, x):
            self.seen.append(self.att.where()[0])
            return self.net1(x)

    class Block(MLP):
        def __init__(self, att, seen):
            torch.nn.Module.__init__(self)
            self.att, self.seen = att, seen
            self.attention = torch.nn.ModuleDict({"wo": _Probe(att, seen)})

        def forward(self, x):
            self.seen.append(self.att.where()[0])
            return self.attention["wo"](x)

    att = Attribution()
    att.install()
    try:
        seen: list[str] = []
        mlp = MLP(att, seen)
        mlp(torch.ones(1))
        assert seen == ["MLP", "net1"]
        dropped = {id(m) for m in mlp.modules()}
        alive = weakref.ref(mlp)
        del mlp
        gc.collect()
        assert alive() is None  # nothing of commtrace's holds a module the program dropped
        assert dropped.isdisjoint(att._names._by_id)  # nor a name under its id
        bare = [Block.__new__(Block) for _ in range(10_000)]
        block = next((b for b in bare if id(b) in dropped), bare[0])
        del bare
        Block.__init__(block, att, seen)
        seen.clear()
        block(torch.ones(1))
        assert seen == ["Block", "attention.wo"]
    finally:
        att.uninstall()


def _backward_modules(model_fn) -> tuple[list[str], list[str]]:
    """Where each `_Mark` backward runs (a stand-in for the backward collective of the op it
    follows): the module commtrace names, and the one CommDebugMode's module tracker names, each
    in a run of its own (the tracker's backward hooks wrap every module's output in a node of
    their own, which would change what commtrace sees)."""
    from torch.distributed.tensor.debug._comm_mode import _CommModeModuleTracker

    from tracer.capture.attribution import Attribution

    ours: list[str] = []
    theirs: list[str] = []
    att = Attribution()
    tracker = _CommModeModuleTracker()

    class _Mark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            if theirs is None:
                ours.append(att.where()[0])
            else:
                theirs.append(tracker.name.split(".", 1)[-1])  # "Model.a.b" -> "a.b"
            return g

    def run(enter, leave):
        torch.manual_seed(0)
        model = model_fn(_Mark.apply)
        x = torch.randn(2, 4, requires_grad=True)
        enter()
        try:
            model(x).sum().backward()
        finally:
            leave()

    run(tracker.__enter__, tracker.__exit__)
    found, theirs = theirs, None  # type: ignore[assignment]
    run(att.install, att.uninstall)
    return ours, found


class _Lin(torch.nn.Module):
    """A linear layer whose own forward hook (like a TP style's output hook) runs `mark`."""

    def __init__(self, mark):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_forward_hook(lambda mod, args, out: mark(out))

    def forward(self, x):
        return self.lin(x)


class _Attention(torch.nn.Module):
    # the corpus Transformer's shape: resid_dropout(wo(h)), a Dropout that returns its input
    # unchanged (p=0 on CPU) or an Identity, inside an enclosing module that returns it as well
    def __init__(self, mark, passthrough):
        super().__init__()
        self.wq = _Lin(mark)
        self.wo = _Lin(mark)
        self.resid_dropout = passthrough

    def forward(self, x):
        return self.resid_dropout(self.wo(torch.relu(self.wq(x))))


class _Model(torch.nn.Module):
    def __init__(self, mark, passthrough):
        super().__init__()
        self.attention = _Attention(mark, passthrough)
        self.norm = torch.nn.Identity()

    def forward(self, x):
        return self.norm(self.attention(x))


@pytest.mark.parametrize("passthrough", [torch.nn.Dropout(0.0), torch.nn.Identity()], ids=["dropout_p0", "identity"])
def test_backward_op_is_filed_under_the_first_module_that_returned_its_tensor(passthrough):
    # Backward: wo's output hook's op, then wq's. The output of wo (after its hook) is returned
    # unchanged by resid_dropout, by attention and by norm: CommDebugMode's full-backward
    # pre-hooks run for norm, attention, resid_dropout and wo in that order, so the op is wo's
    ours, theirs = _backward_modules(lambda mark: _Model(mark, passthrough))
    assert theirs == ["attention.wo", "attention.wq"]
    assert ours == theirs
