"""A pipeline (torch.distributed.pipelining, `--schedule gpipe|1f1b`, a stage per rank: world 2
or 4) whose loss_fn is each microbatch's mean loss (F.mse_loss).

buggy: the schedule built with `scale_grads=False`: the stages' gradients are the sum of the 4
microbatches' mean-loss gradients, every one 4x (the number of microbatches) what the whole
batch's mean loss gives. healthy: `scale_grads=True` (torch's default: the schedule divides the
accumulated gradients by the number of microbatches, as a mean loss needs). World 1 (both
variants): the whole model on the whole batch, no pipeline (pipeline_model.py).

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N pipeline_scale_grads.py VARIANT
--schedule S`, CPU, torch 2.13, float32; GPipe at world 2 and 1F1B at world 4 give the same
figures to the last digit):
  world 1: loss 0.623849273, 0.604202628, 0.588342965 at steps 0-2; after step 2 inp.weight
  -1.82465708, layers.3.weight -5.22111766, out.bias -0.497574538.
  healthy: the last stage's loss 0.623849332, 0.604202628, 0.588342965; after step 2 inp.weight
  -1.82465709, layers.3.weight -5.22111766, out.bias -0.497574553: every gradient and parameter
  within 3e-7 of world 1 (relative to its scale).
  buggy: the loss at step 0 is world 1's (0.623849332), every gradient of step 0's backward 4x
  world 1's; from step 1 the loss is off: 0.558126271 (0.604202628), 0.534369707 (0.588342965);
  after step 2 inp.weight -1.84327328, layers.3.weight -5.25913727, out.bias -0.653567128.
"""

from common import variant
from pipeline_model import train

train(scale_grads=variant() == "healthy")
