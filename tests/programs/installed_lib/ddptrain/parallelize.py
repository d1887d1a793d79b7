import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parallelize(model: nn.Module) -> nn.Module:
    return DDP(model)
