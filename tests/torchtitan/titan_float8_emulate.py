"""A TorchTitan 0.3 config module (`tracer record --torchtitan titan_float8_emulate:CONFIG`, this
folder on PYTHONPATH) for test_torchtitan_float8_emulate.py: TorchTitan's float8 debug model with
the converter's `emulate=True` and nothing else.

TorchTitan 0.3 ships that switch only in `llama3_debugmodel_float8_emulate_lora` (which adds LoRA
adapters to wq / wkv / wo); this is `llama3_debugmodel_float8` (config_registry.py) with the
converter's emulate flag set, so the emulated recipe is recorded on its own. With `emulate=True`
Float8LinearConverter drops the recipe and builds torchao's `Float8LinearConfig(emulate=True)`:
tensorwise scaling, no float8 FSDP all-gather.
"""

from __future__ import annotations

from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer


def llama3_debugmodel_float8_emulate() -> Trainer.Config:
    """llama3_debugmodel_float8 with Float8LinearConverter.Config(emulate=True) (eager: emulate
    refuses compile)."""
    config = llama3_debugmodel()
    config.model_spec = model_registry(
        "debugmodel",
        converters=[Float8LinearConverter.Config(emulate=True, model_compile_enabled=False)],
    )
    return config
