"""HF Trainer as people write it for a custom model: TrainingArguments(use_cpu=True) under torchrun
(DDP on gloo through Accelerate), a tiny module returning {"loss": ...}, a map-style dataset,
max_steps=2, logging every step (the logged loss is reduced across ranks). `--bug
rank0-metric`: a callback all-reduces a metric on the main process only."""
import argparse
import tempfile

import torch
import torch.distributed as dist
from transformers import Trainer, TrainerCallback, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="")
args = parser.parse_args()


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, x, labels=None):
        out = self.net(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(64, 16, generator=g), torch.randn(64, generator=g)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class MetricOnMain(TrainerCallback):
    def on_step_end(self, targs, state, control, **kw):
        if state.is_world_process_zero:
            dist.all_reduce(torch.tensor([float(state.global_step)]))


training_args = TrainingArguments(
    output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2, max_steps=2, use_cpu=True, logging_steps=1,
    save_strategy="no", report_to=[], seed=0, dataloader_num_workers=0, disable_tqdm=True,
)
torch.manual_seed(0)
callbacks = [MetricOnMain()] if args.bug == "rank0-metric" else []
trainer = Trainer(model=Tiny(), args=training_args, train_dataset=Data(), callbacks=callbacks)
trainer.train()
