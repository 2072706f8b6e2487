"""Run by torchrun with --max-restarts in test_elastic.py: on the first
attempt the last rank dies after one allreduce; torchrun restarts the whole
group, which must form a new causeway group through the new rendezvous round
and finish. Each attempt appends one JSON line to ``$ELASTIC_LOG``."""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import causeway.torch  # noqa: F401

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("causeway", timeout=timedelta(seconds=20))
x = torch.full((4096,), float(rank + 1))
dist.all_reduce(x)
ok = bool((x == world * (world + 1) / 2).all())
with open(os.environ["ELASTIC_LOG"], "a") as f:
    f.write(json.dumps({"attempt": attempt, "rank": rank, "world": world, "ok": ok}) + "\n")
# The crash comes only once every rank has its first result: in a ring the
# last rank can finish before a peer has received its last chunk.
store = dist.distributed_c10d._get_default_store()
store.set(f"elastic/done/{attempt}/{rank}", "1")
if attempt == 0 and rank == world - 1:
    store.wait([f"elastic/done/0/{r}" for r in range(world - 1)])
    os._exit(3)  # a crash: no goodbye to the peers
for _ in range(3):
    dist.all_reduce(x)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if ok else 1)
