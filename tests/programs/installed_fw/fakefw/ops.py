import torch
import torch.distributed as dist


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor)
    return torch.cat(out)


class Accelerator:
    def __init__(self) -> None:
        dist.init_process_group("gloo")
        self.is_main_process = dist.get_rank() == 0

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return _gather_one(tensor)

    def reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor)
        return tensor

    def assert_same_length(self, items: list, rank0_length: int) -> None:
        if len(items) != rank0_length:
            rank = dist.get_rank()
            raise RuntimeError(
                f"Detected a disagreement on list length between rank0 and rank{rank}\n"
                f"  rank0: {rank0_length}\n  rank{rank}: {len(items)}"
            )
