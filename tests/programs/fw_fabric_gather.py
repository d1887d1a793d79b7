"""Seeded bug through Lightning Fabric (installed from pip): a metric all_gather on global rank
0 only. The all_gather is issued inside Lightning (lightning/fabric/utilities/distributed.py);
the user's line is the `fabric.all_gather` call."""
import torch
from lightning.fabric import Fabric

fabric = Fabric(accelerator="cpu", devices=4, strategy="ddp")
fabric.launch()
if fabric.global_rank == 0:
    fabric.all_gather(torch.ones(4))
