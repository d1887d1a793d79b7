"""The analyzer's ground floor: what every pass reads and writes, importing nothing else from
`analyzer` (only traceformat, polars and the standard library).

trace.py (the polars view of a trace, `Trace`, built by `from_data`), atoms.py (the atoms
validated once at load), findings.py (`Kind` and `Finding`: what a check reports), text.py (how
ranks, groups, shapes and frames are spelled in messages). Checks and the wait-for analysis sit
on it (analyzer/checks/, analyzer/waitfor/), then `hang`, `report`, the comparisons
(analyzer/compare/), the renderers and the CLI."""
