"""Per-rank values for the local-vs-real parity tests (#31): `dump(name, tensor)` writes each
rank's value to $PARITY_DIR/NAME.RANK.json. On a real run (torchrun) that is this process's
rank; under `tracer record --mode local` every simulated rank's value, which LocalTensor holds."""
import json
import os

import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensor


def dump(name, t):
    out = os.environ.get("PARITY_DIR")
    if not out:
        return
    t = t.detach()
    values = dict(t._local_tensors) if isinstance(t, LocalTensor) else {dist.get_rank(): t}
    for r, v in values.items():
        with open(os.path.join(out, f"{name}.{r}.json"), "w") as f:
            json.dump({"shape": list(v.shape), "values": v.flatten().tolist()}, f)
