"""Data-parallel training with DDP on the ``causeway`` (or ``gloo``) backend.

A synthetic task that needs no download: inputs are Gaussian, labels come
from a fixed random "teacher" network; a student MLP learns them. The same
``--seed`` gives every backend the same data, the same initial weights and the
same batches, so their accuracy after equal steps can be compared.

Launch with torchrun, one process per host (each host sets CAUSEWAY_DOMAIN)::

    torchrun --nnodes 4 --nproc-per-node 1 --node-rank R \\
        --master-addr HOST0 --master-port 29500 train.py --backend causeway

Rank 0 prints one JSON object per step (``event: "step"``: time, loss,
accuracy on the held-out set) and a summary (``event: "summary"``).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["causeway", "gloo"], default="causeway")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=64, help="examples per rank per step")
    p.add_argument("--hidden", type=int, default=2048, help="width (2048: 17 MiB of gradients)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--target-accuracy", type=float, default=0.6)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument(
        "--compress",
        metavar="CODEC",
        help="causeway only: compress the cross-domain gradient bytes (bf16, fp16, int8, topk:1%%) "
        "with causeway.torch.hooks.compressed_allreduce_hook",
    )
    return p.parse_args()


DIM, CLASSES, TRAIN, TEST = 64, 10, 20000, 2000


def dataset(seed):
    g = torch.Generator().manual_seed(seed)
    teacher = [torch.randn(DIM, 128, generator=g) / DIM**0.5, torch.randn(128, CLASSES, generator=g) / 128**0.5]
    x = torch.randn(TRAIN + TEST, DIM, generator=g)
    y = (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(dim=1)
    return (x[:TRAIN], y[:TRAIN]), (x[TRAIN:], y[TRAIN:])


def model(hidden, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(DIM, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, CLASSES),
    )


def main():
    args = parse_args()
    if args.backend == "causeway":
        import causeway.torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    (x, y), (tx, ty) = dataset(args.seed)
    net = DDP(model(args.hidden, args.seed))
    if args.compress:
        if args.backend != "causeway":
            raise SystemExit("--compress needs --backend causeway")
        from causeway.torch.hooks import CompressionState, compressed_allreduce_hook

        net.register_comm_hook(CompressionState(None, codec=args.compress), compressed_allreduce_hook)
    grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    order = torch.randperm(TRAIN, generator=torch.Generator().manual_seed(args.seed + 1))
    out = []
    reached = None
    dist.barrier()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        lo = ((step - 1) * world + rank) * args.batch % (TRAIN - args.batch)
        idx = order[lo : lo + args.batch]
        opt.zero_grad()
        loss = F.cross_entropy(net(x[idx]), y[idx])
        loss.backward()  # DDP allreduces the gradient buckets while backward runs
        opt.step()
        step_s = time.perf_counter() - t0
        acc = None
        if step % args.eval_every == 0 or step == args.steps:
            with torch.no_grad():
                acc = (net.module(tx).argmax(dim=1) == ty).float().mean().item()
            if reached is None and acc >= args.target_accuracy:
                reached = (step, time.perf_counter() - start)
        rec = {"event": "step", "step": step, "time_s": step_s, "loss": loss.item(), "accuracy": acc}
        out.append(rec)
        if rank == 0:
            print(json.dumps(rec), flush=True)
    total = time.perf_counter() - start
    times = sorted(r["time_s"] for r in out[1:]) or [out[0]["time_s"]]
    digest = float(sum(p.detach().double().sum() for p in net.parameters()))
    if rank == 0:
        print(
            json.dumps(
                {
                    "event": "summary",
                    "backend": args.backend,
                    "compress": args.compress,
                    "world": world,
                    "domain": os.environ.get("CAUSEWAY_DOMAIN"),
                    "gradient_bytes": grad_bytes,
                    "steps": args.steps,
                    "median_step_s": times[len(times) // 2],
                    "total_s": total,
                    "final_accuracy": out[-1]["accuracy"],
                    "target_accuracy": args.target_accuracy,
                    "steps_to_target": reached[0] if reached else None,
                    "time_to_target_s": reached[1] if reached else None,
                    "parameter_sum": digest,
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
