"""The reference workload (`tracer record CONFIG.toml`): exact comm patterns derived by hand for
the shipped example configs, on every rank.

Model of every example: dim 64, 4 heads (head dim 16), 2 kv heads, vocab 128, SwiGLU hidden
int(2 * 4 * 64 / 3) = 170 rounded up to a multiple of 32 = 192. Parameters per block:
wq 64x64 + wk 32x64 + wv 32x64 + wo 64x64 = 12288, w1/w2/w3 3 x 192x64 = 36864, two norms 128:
49280. tok_embeddings 128x64 = 8192; [norm, output] 64 + 128x64 = 8256.
"""

import os

import pytest
from conftest import REPO, sig, stream

AG, RS, AR, A2A = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single")
COMM = (AG, RS, AR, A2A)
P2P = ("send", "recv")
EXAMPLES = os.path.join(REPO, "examples")  # the `workload` fixture is in conftest.py


def comm(t, rank, ops=COMM):
    return [e for e in stream(t, rank) if e["op"] in ops]


# ---- FSDP2 -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fake", "local"])
def test_fsdp_all_gathers_and_reduce_scatters_per_unit_per_step(workload, mode):
    # fsdp.toml: 4 ranks; every 4-rank dim (batch, fsdp, loss_mesh) is the whole world, so torch
    # hands each the default group: label "world". Units (TorchTitan's wrapping): tok_embeddings
    # E (8192 -> 2048 per rank), layers.0 / layers.1 (49280 -> 12320), [norm, output] F (8256 ->
    # 2064), root (no params). "default" resharding: E and the blocks reshard after forward, F
    # does not. Mixed precision (TorchTitan's defaults): all-gathers in bf16, reduce-scatters in
    # fp32; gradient division off (factor 1.0), so FSDP reduces with premul_sum.
    # Per step: the global token count (int64 scalar, sum); forward AG E, L0, L1, F; backward in
    # reverse: F is still gathered, its pre-backward only prefetches L1 (AG L1), RS F; L1's
    # pre-backward prefetches L0, RS L1; L0 prefetches E, RS L0; RS E. Then the grad norm: one
    # all-reduce of the 21 per-parameter norms (all Shard(0) over fsdp; 9 per block, E, norm,
    # output). Step 1 (TorchTitan counts from 1) logs: loss sum, loss max, tokens seen (int64).
    # Selective AC recomputes nothing that communicates here (no tensor parallel).
    t, _ = workload("fsdp", mode)
    size = {"tok_embeddings": 2048, "layers.0": 12320, "layers.1": 12320, "norm, output": 2064}
    seq = iter(range(100))

    def ag(unit, phase, step):
        return (
            (AG, "world", next(seq), -1, "bfloat16", [[size[unit]]], [[4 * size[unit]]], None, 0),
            unit,
            phase,
            step,
        )

    def rs(unit, step):
        return (
            (RS, "world", next(seq), -1, "float32", [[4 * size[unit]]], [[size[unit]]], "premul_sum", 0),
            unit,
            "backward",
            step,
        )

    def ar(dtype, shape, op, step):
        return ((AR, "world", next(seq), -1, dtype, shape, shape, op, 1), "", "other", step)  # funcol: async

    expected = []
    for step in range(2):
        expected += [ar("int64", [[]], "sum", step)]
        expected += [
            ag("tok_embeddings", "forward", step),
            ag("layers.0", "forward", step),
            ag("layers.1", "forward", step),
            ag("norm, output", "forward", step),
            ag("layers.1", "backward", step),
            rs("norm, output", step),
            ag("layers.0", "backward", step),
            rs("layers.1", step),
            ag("tok_embeddings", "backward", step),
            rs("layers.0", step),
            rs("tok_embeddings", step),
        ]
        expected += [ar("float32", [[21]], "sum", step)]
        if step == 0:  # logged after the optimizer step: attributed to the next step
            expected += [ar("float32", [[]], "sum", 1), ar("float32", [[]], "max", 1), ar("int64", [[]], "sum", 1)]
    for rank in range(4):
        assert [(sig(e), e["module"] or "", e["phase"], e["step"]) for e in comm(t, rank)] == expected


# ---- HSDP x TP + SP ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fake", "local"])
def test_hsdp_with_tensor_and_sequence_parallel(workload, mode):
    # hsdp_tp.toml: dense mesh (dp_replicate 2, fsdp 2, tp 2), 8 ranks; batch = dp_replicate x
    # fsdp (4 ranks). Batch 2 x seq 16 x dim 64; sequence parallel holds (2, 8, 64) per rank. A
    # tp all-gather along dim 1 goes through dim 0: (2, 8, 64) -> (4, 8, 64); a tp
    # reduce-scatter (4, 8, 64) -> (2, 8, 64). Activations are bf16 (FSDP gathers bf16 params).
    # FSDP units hold the tp-local parameters: a block has 49280 / 2 (tp) = 24640 + 64 (the two
    # norms stay whole: 128 instead of 64) = 24704, 12352 per fsdp rank; tok_embeddings 4096
    # (vocab-sharded) -> 2048; [norm, output] 64 + 4096 = 4160 -> 2080. All-gathers bf16,
    # gradients reduced in fp32: each reduce-scatter on fsdp (premul_sum, division off) is
    # followed by a sum all-reduce on dp_replicate.
    # Per step: the token count (int64, sum over batch). Forward: AG E; tp RS (tok_embeddings'
    # partial output -> Shard(1)); per block: AG block, tp AG, tp RS (attention), tp AG, tp RS
    # (feed-forward); AG F; tp AG (norm output -> output input). Loss parallel: the logits stay
    # vocab-sharded (no gather); the loss takes three fp32 tp all-reduces of one value per token
    # (32 tokens): max, sum of exps, target log-prob.
    # Backward: AG L1 (prefetch); tp RS (output's input grad); tp AR (norm weight grad: a
    # replicated weight fed by sequence shards gets a Partial grad), RS + AR F; AG L0 (prefetch);
    # L1: tp AG (w2's reduce-scatter, backward); selective AC recomputes the forward, whose two
    # all-gathers were not saved (reduce-scatters were): tp AG (attention), tp AG (feed-forward);
    # then tp RS (feed-forward input grad), tp AG + RS (attention), tp AR x2 (attention_norm,
    # ffn_norm), RS + AR L1; AG E (prefetch); L0 the same; tp AG (tok_embeddings' output grad),
    # RS + AR E. Grad norm: the 21 per-parameter norms are partial over fsdp and tp: one fp32
    # all-reduce on each. Step 1 logs three all-reduces over loss_mesh (= batch).
    t, _ = workload("hsdp_tp", mode)
    sp, full = [[2, 8, 64]], [[4, 8, 64]]
    tp_ag = (AG, "tp", sp, full, None, "bfloat16")
    tp_rs = (RS, "tp", full, sp, "sum", "bfloat16")
    tp_ar = (AR, "tp", [[64]], [[64]], "sum", "bfloat16")
    size = {"E": 2048, "L": 12352, "F": 2080}
    dp_ag = lambda u: (AG, "fsdp", [[size[u]]], [[2 * size[u]]], None, "bfloat16")
    dp_rs = lambda u: [
        (RS, "fsdp", [[2 * size[u]]], [[size[u]]], "premul_sum", "float32"),
        (AR, "dp_replicate", [[size[u]]], [[size[u]]], "sum", "float32"),
    ]
    loss = [(AR, "tp", [[32, 1]], [[32, 1]], op, "float32") for op in ("max", "sum", "sum")]
    block_fwd = [dp_ag("L"), tp_ag, tp_rs, tp_ag, tp_rs]
    block_bwd = [tp_ag, tp_ag, tp_ag, tp_rs, tp_ag, tp_rs, tp_ar, tp_ar, *dp_rs("L")]
    step = (
        [(AR, "batch", [[]], [[]], "sum", "int64"), dp_ag("E"), tp_rs]
        + block_fwd
        + block_fwd
        + [dp_ag("F"), tp_ag]
        + loss
        + [dp_ag("L"), tp_rs, tp_ar, *dp_rs("F"), dp_ag("L")]
        + block_bwd
        + [dp_ag("E")]
        + block_bwd
        + [tp_ag, *dp_rs("E")]
        + [(AR, dim, [[21]], [[21]], "sum", "float32") for dim in ("fsdp", "tp")]
    )
    logged = [
        (AR, "loss_mesh", [[]], [[]], op, dtype)
        for op, dtype in (("sum", "float32"), ("max", "float32"), ("sum", "int64"))
    ]
    for rank in range(8):
        got = [
            (e["op"], e["group"][0], e["in_shapes"], e["out_shapes"], e["reduce_op"], e["dtype"]) for e in comm(t, rank)
        ]
        assert got == step + logged + step
        # per step, tp all-gathers: forward 2 per block + 1 (output); backward 4 per block (2 of
        # them recomputed) + 1 (embeddings); reduce-scatters 2 per block + 1 each way
        ag = [e["phase"] for e in comm(t, rank) if e["op"] == AG and e["group"][0] == "tp" and e["step"] == 0]
        assert (ag.count("forward"), ag.count("backward")) == (5, 9)
        # forward tp collectives are filed under the module whose hook issued them, as
        # CommDebugMode files them: the input all-gather in the region's input hook (attention,
        # feed_forward), the reduce-scatter in the output hook of tok_embeddings, wo and w2;
        # the output's input all-gather in output's input hook. The checkpoint wrapper is in the path.
        mods = [e["module"] for e in comm(t, rank) if e["group"][0] == "tp" and e["phase"] == "forward"]
        assert mods[:10] == ["tok_embeddings"] + [
            f"layers.{i}._checkpoint_wrapped_module.{m}"
            for i in (0, 1)
            for m in ("attention", "attention.wo", "feed_forward", "feed_forward.w2")
        ] + ["output"]


# ---- pipeline parallel -------------------------------------------------------------------
def _p2p(t, rank):
    return [(e["op"], e["peer"], e["in_shapes"] or e["out_shapes"], e["step"]) for e in comm(t, rank, P2P)]


def _vote(stage_ops, peer):
    # PipelineStage's warm-up vote, first step only: an int32 [1] forward through the stages
    # (each stage receives it from the previous one and sends it on), then the result back
    return [(op, peer, [[1]], 0) for op in stage_ops]


def test_pipeline_1f1b_sends_and_recvs_per_microbatch(workload):
    # fsdp_tp_pp_1f1b.toml: mesh (pp 2, dp_shard 2, tp 2); stage 0 on ranks 0-3, stage 1 on
    # ranks 4-7, peer = rank +- 4. 4 microbatches of (1, 16) tokens; the activation between the
    # stages is the sequence-parallel residual (1, 8, 64), its gradient the same.
    # Schedule1F1B, stage 0 (warmup = min(4, 2 - 0) = 2): F0 send a0; F1 (its send held back);
    # then per 1B1F: [send a1 + recv g0] B0, F2; [send a2 + recv g1] B1, F3; [send a3 + recv g2]
    # B2; cooldown: recv g3, B3.
    # Stage 1 (warmup 1): recv a0, F0; then per 1B1F: B0 [send g0 + recv a1] F1; B1 [send g1 +
    # recv a2] F2; B2 [send g2 + recv a3] F3; B3, send g3.
    t, _ = workload("fsdp_tp_pp_1f1b")
    h = [[1, 8, 64]]
    for rank in range(8):
        first = rank < 4
        peer = rank + 4 if first else rank - 4
        expected = []
        for step in range(2):
            if step == 0:
                expected += _vote(["send", "recv"] if first else ["recv", "send"], peer)
            ops = ["send", "send", "recv", "send", "recv", "send", "recv", "recv"] if first else ["recv", "send"] * 4
            expected += [(op, peer, h, step) for op in ops]
        assert _p2p(t, rank) == expected


def test_pipeline_interleaved_1f1b_sends_and_recvs_per_microbatch(workload):
    # fsdp_tp_pp_interleaved.toml: pp 2 x 2 stages per rank = 4 stages of one block each (rank
    # group 0 holds stages 0 and 2, rank group 1 stages 1 and 3); 2 microbatches.
    # Compute order (torch's Interleaved1F1B: warmup 2*(v-1)... = 4 ops on pp rank 0, 2 on 1):
    #   pp rank 0: F0s0 F1s0 F0s2 F1s2 B0s2 B1s2 B0s0 B1s0
    #   pp rank 1: F0s1 F1s1 F0s3 B0s3 F1s3 B1s3 B0s1 B1s1
    # Comms are placed as the ranks advance in lockstep (rank 0, then rank 1, per round); each
    # F with the next stage elsewhere posts a send, the receiver's recv lands in its list then:
    #   pp rank 0: F0s0 S | R(a0 s2) | F1s0 S | R(a1 s2) | F0s2 S | F1s2 S | R(g0 s2) B0s2 S |
    #              R(g1 s2) B1s2 S | R(g0 s0) B0s0 | R(g1 s0) B1s0
    #   pp rank 1: R F0s1 S | R F1s1 S | R(a0 s3) F0s3 | R(a1 s3) B0s3 S | R(g0 s1) F1s3 B1s3 S |
    #              R(g1 s1) B0s1 S B1s1 S
    # Vote over 4 stages, rank 0: s0 sends, s2 receives then sends; back: s2 receives, sends,
    # s0 receives. Rank 1 the mirror image.
    t, _ = workload("fsdp_tp_pp_interleaved")
    h = [[1, 8, 64]]
    for rank in range(8):
        first = rank < 4
        peer = rank + 4 if first else rank - 4
        expected = []
        for step in range(2):
            if step == 0:
                expected += _vote(["send", "recv"] * 3 if first else ["recv", "send"] * 3, peer)
            ops = (
                ["send", "recv", "send", "recv", "send", "send", "recv", "send", "recv", "send", "recv", "recv"]
                if first
                else ["recv", "send", "recv", "send", "recv", "recv", "send", "recv", "send", "recv", "send", "send"]
            )
            expected += [(op, peer, h, step) for op in ops]
        assert _p2p(t, rank) == expected


def test_local_mode_refuses_pipeline_configs(tmp_path):
    from conftest import run_tracer

    p = run_tracer("tracer", "record", os.path.join(EXAMPLES, "fsdp_tp_pp_1f1b.toml"), "--mode", "local", cwd=tmp_path)
    assert p.returncode == 2
    assert "pipeline parallel needs p2p" in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.iterdir())


# ---- expert parallel ---------------------------------------------------------------------
def _a2a(t, rank):
    return [e for e in comm(t, rank, (A2A,))]


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_expert_parallel_all_to_alls_per_moe_layer(workload, mode):
    # fsdp_ep.toml: 4 ranks, fsdp 4; the sparse mesh efsdp 2 x ep 2 (TorchTitan 0.3's names; the
    # ep group: ranks {0,1} and {2,3}); 4 experts, 2 per ep rank; top 2 of 4 for 2 x 16 tokens = 64
    # routed rows of 64. Per MoE layer, forward: a2a of the per-expert counts ([4] -> [4], equal
    # splits 2/2), a2a dispatching the rows (in: 64 rows, split by the destination's experts),
    # a2a combining them back (the dispatch's splits swapped). Backward, per layer in reverse:
    # the combine's a2a, then the dispatch's, each with swapped splits (counts need no grad).
    # Selective AC saves all_to_all_single outputs: nothing recomputed.
    t, _ = workload("fsdp_ep", mode)
    for rank in range(4):
        a = _a2a(t, rank)
        assert len(a) == 2 * 10  # 2 steps x 2 layers x (3 forward + 2 backward)
        assert {e["group"][0] for e in a} == {"ep"}
        assert all(e["async_op"] == 1 for e in a)
        for step in range(2):
            s = a[10 * step : 10 * (step + 1)]
            fwd, bwd = s[:6], s[6:]
            assert [e["phase"] for e in s] == ["forward"] * 6 + ["backward"] * 4
            moe = [f"layers.{i}._checkpoint_wrapped_module.moe" for i in (0, 1)]  # under selective AC
            assert [e["module"] for e in fwd] == [moe[0]] * 3 + [moe[1]] * 3
            layers = {}
            for layer in range(2):
                counts, dispatch, combine = fwd[3 * layer : 3 * layer + 3]
                assert counts["in_shapes"] == counts["out_shapes"] == [[4]]
                assert counts["splits"] == [[2, 2], [2, 2]]
                send, recv = dispatch["splits"]
                assert sum(send) == 64 and dispatch["in_shapes"] == [[64, 64]]
                assert dispatch["out_shapes"] == [[sum(recv), 64]]
                assert combine["splits"] == [recv, send]
                layers[layer] = (send, recv)
            # backward runs layer 1 then layer 0: combine's grad (splits of the dispatch), then
            # dispatch's grad (splits of the combine)
            for k, layer in enumerate((1, 0)):
                send, recv = layers[layer]
                assert bwd[2 * k]["splits"] == [send, recv]
                assert bwd[2 * k + 1]["splits"] == [recv, send]


def test_expert_parallel_splits_are_consistent_across_ranks_in_local_mode(workload):
    # LocalTensor computes every rank's routing, so what rank i sends rank j (its input split
    # j) is what j expects from i (its output split i): the data-dependent case fake mode
    # cannot get right (each fake rank only knows its own counts)
    t, _ = workload("fsdp_ep", "local")
    a = {rank: _a2a(t, rank) for rank in range(4)}
    for i in range(20):
        for group in ((0, 1), (2, 3)):
            for gi, ri in enumerate(group):
                for gj, rj in enumerate(group):
                    assert a[ri][i]["splits"][0][gj] == a[rj][i]["splits"][1][gi]


# ---- fake and local agree ----------------------------------------------------------------
SKIP = {"ts", "rank", "label", "ranks"}
DATA = {"splits", "in_shapes", "out_shapes", "in_bytes", "out_bytes"}


@pytest.mark.parametrize("name", ["fsdp", "hsdp_tp", "fsdp_ep"])
def test_fake_and_local_modes_agree(workload, name):
    # every column of every event, except where the values depend on data: the expert-parallel
    # token all_to_alls, whose splits fake mode derives from its own rank's counts only
    fake, local = workload(name, "fake")[0], workload(name, "local")[0]
    assert fake.ranks == local.ranks
    for rank in fake.ranks:
        a, b = stream(fake, rank), stream(local, rank)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            drop = SKIP | (DATA if x["op"] == A2A and x["in_shapes"] != [[4]] else set())
            assert {k: v for k, v in x.items() if k not in drop} == {k: v for k, v in y.items() if k not in drop}


# ---- every example records and summarises -------------------------------------------------
@pytest.mark.parametrize("name", sorted(f[:-5] for f in os.listdir(EXAMPLES) if f.endswith(".toml")))
def test_every_example_records_and_summarises(workload, name, tmp_path):
    import json

    from conftest import run_tracer

    t, res = workload(name)
    assert t.header["config"]["parallelism"]["data_parallel_shard_degree"] >= 1
    p = run_tracer("analyzer", "summary", res.out, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary
    text = run_tracer("analyzer", "summary", res.out, cwd=tmp_path)
    assert text.returncode == 0 and "rank class" in text.stdout
