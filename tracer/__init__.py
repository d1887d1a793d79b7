"""commtrace recorder: run a torch.distributed program per simulated rank and record its comms.

Import-light on purpose: `tracer.format` is torch-free and shared with the analyzer.
"""
