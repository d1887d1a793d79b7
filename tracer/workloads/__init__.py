"""The reference workload `tracer record CONFIG.toml` runs: a Llama-style transformer
(model.py), one file per parallelism, applied on one DeviceMesh by train.py."""
