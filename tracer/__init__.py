"""commtrace recorder: run a torch.distributed program per simulated rank and record its comms.

Import-light on purpose. The trace format it writes is `traceformat` (torch-free, shared with the
analyzer); the recorder imports nothing from the analyzer (it runs `python -m analyzer` where it
needs an analysis).
"""
