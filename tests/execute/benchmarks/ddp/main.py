"""Two gloo workers started by torchrun; rank 0 reports the global rate (smuggled)."""

import os
import time

import torch
import torch.distributed as dist

from benchkit.channel import DataWriter

dist.init_process_group("gloo")
rank = dist.get_rank()
world = dist.get_world_size()
writer = DataWriter()
for _step in range(3):
    t0 = time.perf_counter()
    tensor = torch.ones(1000) * (rank + 1)
    dist.all_reduce(tensor)
    n = torch.tensor([32.0])
    dist.all_reduce(n)
    elapsed = time.perf_counter() - t0
    if rank == 0:
        writer.write(
            {
                "task": "train",
                "rate": float(n.item()) / elapsed,
                "units": "items/s",
                "world": world,
                "sum": float(tensor[0].item()),
            }
        )
writer.close()
print(f"rank {rank} of {world} done (DATA_FD={os.environ.get('DATA_FD')})", flush=True)
dist.destroy_process_group()
