"""Recording: one RecordRequest (request.py, built once by build.py from CLI + TOML), the
pipeline of named stages (pipeline.py), its typed result (result.py), rank sharing, merging."""
