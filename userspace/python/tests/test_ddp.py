"""DistributedDataParallel over the causeway group, and Causeway's comm hook
under a Gloo default group, train exactly like DDP over Gloo."""

import workers
import world

STEPS = 5


def test_ddp_over_causeway_and_the_hook_train_like_gloo():
    out = world.run(workers.ddp_matches_gloo, 2, STEPS, timeout=180)
    for rank, o in out.items():
        assert o["moved"] > 1e-3, f"rank {rank}: training did not change the parameters"
        # Two ranks: one addition per element, so even bit-identical (asserted with a margin).
        assert o["diff"]["causeway"] < 1e-5, (rank, o)
        assert o["diff"]["hook"] < 1e-5, (rank, o)
        # Bucketed: more than one allreduce per backward on average for the
        # two causeway users (DDP over the group, and the hook); DDP's first
        # iteration runs with one big bucket, then rebuilds them.
        assert o["allreduces"] > 2 * STEPS, (rank, o)
