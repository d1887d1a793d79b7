"""A pipeline (torch.distributed.pipelining, `--schedule gpipe|1f1b`, a stage per rank: world 2
or 4) of 5 layers split into one stage per rank by hand.

buggy: the split gives every stage `N_LAYERS // stages` layers from `stage * per`: with 5
layers on 2 or 4 stages the last layer (layers.4) is on no stage; the pipeline trains a model
without it and the parameter is nowhere. healthy: the remainder goes to the first stages (3 + 2
on two, 2 + 1 + 1 + 1 on four). World 1 (both variants): the whole model, no pipeline.

Figures: see below.
"""

from common import variant
from pipeline_model import N_LAYERS, even_split, train


def floor_split(stage: int, stages: int) -> range:
    per = N_LAYERS // stages
    return range(stage * per, (stage + 1) * per)


train(split=even_split if variant() == "healthy" else floor_split)
