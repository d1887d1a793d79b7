"""What communication costs on a named cluster (docs/cost-model.md). Torch-free and columnar:
polars expressions over the trace's frames, never a Python loop per event.

    cluster.py  ClusterSpec, PRESETS, DEFAULT, load_cluster(spec, ranks_per_node) -> ClusterSpec
                (ClusterError: one line), ClusterSpec.node_of(rank expr) -> node expr
    model.py    op_seconds(frame, cluster, groups) -> frame + bytes, n, nodes, per_node, seconds,
                algo; seconds_expr(cluster); collective_seconds / busbw for one collective
    step.py     step_cost(trace, cluster) -> StepCost (per step, rank class, mesh dim x op x
                phase, overlappable vs exposed); priced_patterns(trace, cluster)
    published.py, fit.py   the nccl-tests figures the presets are calibrated to; the fit table
"""
