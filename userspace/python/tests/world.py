"""Runs a function on every rank of a small world, each rank its own process,
under torchrun's environment variables on loopback.

The processes are forked from the test process, which has imported torch but
run nothing on it (no threads yet), as torch.multiprocessing does by default
on Linux: a spawned process would import torch again (seconds per rank)."""

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world, env, args, results):
    os.environ.update(env)
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world)
    )
    try:
        results.put((rank, "ok", fn(rank, world, *args)))
    except BaseException as e:  # reported to the test, with its type and traceback
        results.put((rank, "err", (type(e).__name__, str(e), traceback.format_exc())))


def run_raw(fn, world, *args, env=None, per_rank_env=None, timeout=120.0, expect=None):
    """Runs ``fn(rank, world, *args)`` on ``world`` forked processes and
    returns ``{rank: ("ok", result) | ("err", (type name, message, traceback))}``
    for the ranks that reported within ``timeout`` (waiting for ``expect``
    reports, all ranks by default). Leftover processes are killed."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "CAUSEWAY_PROBE": "0"}
    base.update(env or {})
    procs = []
    for r in range(world):
        e = dict(base)
        e.update((per_rank_env or {}).get(r, {}))
        p = ctx.Process(target=_child, args=(fn, r, world, e, args, results), daemon=True)
        p.start()
        procs.append(p)
    expect = world if expect is None else expect
    out = {}
    deadline = time.monotonic() + timeout
    while len(out) < expect and time.monotonic() < deadline:
        try:
            rank, status, value = results.get(timeout=0.5)
            out[rank] = (status, value)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()
    return out


def run(fn, world, *args, **kwargs):
    """``run_raw`` that fails unless every rank returned; returns results by rank."""
    timeout = kwargs.get("timeout", 120.0)
    out = run_raw(fn, world, *args, **kwargs)
    msg = []
    missing = [r for r in range(world) if r not in out]
    if missing:
        msg.append(f"ranks without a result within {timeout} s: {missing}")
    for r, (status, value) in sorted(out.items()):
        if status == "err":
            name, text, tb = value
            msg.append(f"rank {r}: {name}: {text}\n{tb}")
    if msg:
        raise AssertionError("\n".join(msg))
    return {r: v for r, (_, v) in out.items()}
