"""Which modules each pipeline stage holds, split as TorchTitan 0.3 splits an LLM
(torchtitan/distributed/pipeline_parallel.py, _generate_llm_fqn_per_model_part). Torch-free:
the config check refuses impossible splits before anything runs.

tok_embeddings counts as `input_weight` layers, norm + output as `output_weight`; the
n_layers + both weights "effective layers" are dealt out evenly, the first stages taking one
more each when they do not divide. So 6 layers over 4 stages (8 effective): [emb, 0], [1, 2],
[3, 4], [5, norm, output]; 4 layers over 4 stages (6 effective): [emb, 0], [1, 2], [3],
[norm, output] (a stage of no blocks).
"""

from __future__ import annotations


def stage_modules(n_stages: int, n_layers: int, input_weight: int = 1, output_weight: int = 1) -> list[list[str]]:
    """Module names per stage; ValueError (one line) where TorchTitan refuses the split."""
    if n_stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(n_layers)), "norm", "output"]]
    effective = n_layers + input_weight + output_weight
    if n_stages > effective:
        raise ValueError(
            f"{n_stages} pipeline stages cannot split {n_layers} layers (+ {input_weight} for "
            f"tok_embeddings, + {output_weight} for norm and output): more stages than layers"
        )
    per, extra = divmod(effective, n_stages)
    if input_weight > per or output_weight > per:
        raise ValueError(
            f"pipeline_parallel_first/last_stage_less_layers ({input_weight}/{output_weight}) exceed "
            f"the {per} layers per stage of {n_layers} layers over {n_stages} stages"
        )
    stages, layer = [], 0
    for s in range(n_stages):
        count = per + (s < extra)
        names = ["tok_embeddings"] if s == 0 else []
        count -= input_weight if s == 0 else output_weight if s == n_stages - 1 else 0
        for _ in range(count):
            if layer < n_layers:
                names.append(f"layers.{layer}")
                layer += 1
        if s == n_stages - 1:
            names += ["norm", "output"]
        stages.append(names)
    return stages  # the counts add up to n_layers exactly
