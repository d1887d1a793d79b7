"""What communication costs on a named cluster: cluster specs (presets, TOML, placement), a
per-collective alpha-beta model calibrated to published nccl-tests bus bandwidths, and per-step
aggregation (docs/cost-model.md). Torch-free and columnar: polars expressions over the trace's
frames, never a Python loop per event."""
