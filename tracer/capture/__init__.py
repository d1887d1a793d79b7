"""The hooks every mode shares (needs torch): the recorder and its attribution, the recording
process group and its Work, the patches on torch.distributed's entry points, the argument checks,
DDP and compile support. A mode's own machinery lives in its package (tracer/fake, tracer/local,
tracer/real) and the numerics digests in tracer/numerics; nothing here imports them."""
