"""commtrace's trace format, shared by the recorder (`tracer`) and the analyzer (`analyzer`).

Torch-free and import-light: format.py (records, layout, writer), reader.py (decoding), codec.py
(a block's column packings), parts.py (per-rank parts: merge, combine, write back), ranks.py
(rank-list syntax).
"""
