"""Elastic torchrun (c10d rendezvous, --max-restarts): a rank that crashes on
the first attempt makes torchrun restart the group, and the restarted ranks
build a fresh causeway group through the new rendezvous round and finish."""

import json
import os
import pathlib
import subprocess
import sys

import world

HERE = pathlib.Path(__file__).resolve().parent


def test_torchrun_restarts_after_a_crash_and_the_new_group_works(tmp_path):
    log = tmp_path / "attempts.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(CAUSEWAY_PROBE="0", OMP_NUM_THREADS="1", ELASTIC_LOG=str(log))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "3",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{world.free_port()}",
         "--max-restarts", "1", "--monitor-interval", "0.5", str(HERE / "elastic_worker.py")],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    first = sorted(l["rank"] for l in lines if l["attempt"] == 0)
    second = sorted(l["rank"] for l in lines if l["attempt"] == 1)
    assert first == [0, 1, 2] and second == [0, 1, 2], lines
    assert all(l["ok"] and l["world"] == 3 for l in lines), lines
