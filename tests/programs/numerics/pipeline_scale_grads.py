"""A pipeline (torch.distributed.pipelining, `--schedule gpipe|1f1b`, a stage per rank: world 2
or 4) whose loss_fn is each microbatch's mean loss (F.mse_loss).

buggy: the schedule built with `scale_grads=False`: the stages' gradients are the sum of the 4
microbatches' mean-loss gradients, every one 4x (the number of microbatches) what the whole
batch's mean loss gives. healthy: `scale_grads=True` (torch's default: the schedule divides the
accumulated gradients by the number of microbatches, as a mean loss needs). World 1 (both
variants): the whole model on the whole batch, no pipeline (pipeline_model.py).

Figures: see below.
"""

from common import variant
from pipeline_model import train

train(scale_grads=variant() == "healthy")
