"""Seeded bug through Accelerate (a framework installed from pip): the evaluation gathers its
predictions on the main process only. The all_gather is issued inside Accelerate
(accelerate/utils/operations.py, `_gpu_gather_one`); the user's line is `evaluate`'s gather."""
import torch
from accelerate import Accelerator


def evaluate(acc, model):
    preds = model(torch.randn(4, 8))
    if acc.is_main_process:
        return acc.gather(preds)
    return preds


acc = Accelerator(cpu=True)
evaluate(acc, acc.prepare(torch.nn.Linear(8, 2)))
