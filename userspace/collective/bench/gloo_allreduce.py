#!/usr/bin/env python3
"""PyTorch Gloo allreduce worker: the reference that causeway-allreduce-bench is
compared with. Run one per rank with torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT); `cargo xtask bench allreduce` runs it on the
two-domain testbed beside causeway-allreduce-bench (xtask/src/bench_allreduce.rs).

Rank 0 prints one JSON line per size with the same fields as the Rust benchmark:
median time, algbw and busbw (bytes x 2(n-1)/n / time), in GB/s. Every rank
prints an "iters" line with its wall-clock call and return times (the warm-up
iterations' separately) and the process CPU time (all threads) its timed calls took.
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_size(s: str) -> int:
    s = s.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64K,1M,16M", help="bytes of float32 per rank, e.g. 64K,1M,16M")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]

    import torch
    import torch.distributed as dist

    t0 = time.perf_counter()
    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(json.dumps({"impl": "gloo", "event": "init", "world": world, "init_s": time.perf_counter() - t0,
                          "torch": torch.__version__}), flush=True)
    for nbytes in sizes:
        elems = max(nbytes // 4, 1)
        buf = torch.arange(elems, dtype=torch.float32).remainder_(7)
        first = buf.clone()
        times, starts, ends = [], [], []
        warm_starts, warm_ends, cpu_s = [], [], 0.0
        for i in range(args.warmup + args.iters):
            dist.barrier()
            t, start, cpu = time.perf_counter(), time.time_ns(), time.process_time()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            if i >= args.warmup:
                cpu_s += time.process_time() - cpu
                times.append(time.perf_counter() - t)
                starts.append(start)
                ends.append(time.time_ns())
            else:
                warm_starts.append(start)
                warm_ends.append(time.time_ns())
            # Checked exactly, outside the timed part, like the Rust worker: each
            # rank put in k % 7 at element k in the first iteration and 1 later,
            # small integers that every summation order gets exactly right.
            want = first * world if i == 0 else torch.full_like(buf, float(world))
            if not torch.equal(buf, want):
                k = int((buf != want).nonzero()[0])
                raise SystemExit(f"{nbytes} bytes, iteration {i}: wrong result: element {k} is "
                                 f"{float(buf[k])}, want {float(want[k])}")
            buf.fill_(1.0)
        # Every rank's call and return times on the wall clock (see the Rust bench).
        print(json.dumps({"impl": "gloo", "event": "iters", "rank": rank, "bytes": elems * 4,
                          "start_unix_ns": starts, "end_unix_ns": ends, "times_s": times,
                          "warmup_start_unix_ns": warm_starts, "warmup_end_unix_ns": warm_ends,
                          "cpu_s": cpu_s}), flush=True)
        times.sort()
        median = times[len(times) // 2]
        algbw = elems * 4 / median / 1e9
        busbw = algbw * 2 * (world - 1) / world
        if rank == 0:
            print(json.dumps({"impl": "gloo", "world": world, "bytes": elems * 4, "dtype": "float32",
                              "iters": args.iters, "median_s": median, "min_s": times[0], "max_s": times[-1],
                              "algbw_GBps": algbw, "busbw_GBps": busbw, "algorithm": "gloo-default",
                              "checked": True}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
