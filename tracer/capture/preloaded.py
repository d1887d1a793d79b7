"""Imported last by the local executor's fork server (after torch.distributed, DTensor, FSDP2 and
pipelining): indexes which loaded modules hold the torch.distributed functions the patches
replace, once, so that every rank forked from the server starts with the index."""

from tracer.capture import patches

patches.index_loaded_modules()
