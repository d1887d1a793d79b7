"""Comparing and summarizing traces, above the checks: normalize.py (what is comparable across
runs: one signature per event), diff.py (`analyzer diff`: where two comm patterns part),
golden.py (`analyzer golden check`: traces against the goldens in traces/), summary.py
(`analyzer summary`: collectives and bytes per rank class)."""
