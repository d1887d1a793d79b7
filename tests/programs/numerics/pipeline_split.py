"""A pipeline (torch.distributed.pipelining, `--schedule gpipe|1f1b`, a stage per rank: world 2
or 4) of 5 layers split into one stage per rank by hand.

buggy: the split gives every stage `N_LAYERS // stages` layers from `stage * per`: with 5
layers on 2 or 4 stages the last layer (layers.4) is on no stage; the pipeline trains a model
without it and the parameter is nowhere. healthy: the remainder goes to the first stages (3 + 2
on two, 2 + 1 + 1 + 1 on four). World 1 (both variants): the whole model, no pipeline.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N pipeline_split.py VARIANT --schedule
S`, CPU, torch 2.13, float32; GPipe at world 2 and 1F1B at world 4 give the same figures to the
last digit):
  world 1: loss 0.623849273, 0.604202628, 0.588342965 at steps 0-2; after step 2 layers.3.weight
  -5.22111766, layers.4.weight 1.60802722, out.bias -0.497574538.
  healthy: as world 1 within 3e-7 (relative to each value's scale): loss 0.623849332,
  0.604202628, 0.588342965; after step 2 layers.4.weight 1.60802722, out.bias -0.497574553.
  buggy: no stage holds layers.4 (a parameter of world 1 only); off world 1 from step 0's
  forward (out's output sum -4.86579116 against -2.48779739, world 4); loss 0.623911798,
  0.603393018, 0.586599827; after step 2 layers.3.weight -5.16888429, out.bias -0.456758607.
  Every rank sends and receives the same p2p shapes as in the healthy run (118 events at world
  2, 352 at world 4 in `tracer record --mode real`): the comm pattern cannot tell.
"""

from common import variant
from pipeline_model import N_LAYERS, even_split, train


def floor_split(stage: int, stages: int) -> range:
    per = N_LAYERS // stages
    return range(stage * per, (stage + 1) * per)


train(split=even_split if variant() == "healthy" else floor_split)
