"""Every collective x dtype on the causeway backend against Gloo's result, in
one 3-rank world (both backends in the same processes)."""

import pytest

import workers
import world

COLLECTIVES = (
    [f"allreduce_{op}" for op in workers.OPS]
    + [f"reduce_scatter_tensor_{op}" for op in workers.OPS]
    + [
        "allreduce_noncontiguous",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "async",
    ]
)


@pytest.fixture(scope="module")
def reports():
    # Small chunks: every operation is pipelined over several chunks and lanes.
    env = {"CAUSEWAY_CHUNK_BYTES": "4kb"}
    return world.run(workers.compare_all, 3, env=env, timeout=300)


@pytest.mark.parametrize("dtype", list(workers.DTYPES))
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_matches_gloo(reports, collective, dtype):
    for rank, report in sorted(reports.items()):
        assert (collective, dtype) in report, f"rank {rank} did not run {collective} {dtype}"
        assert report[(collective, dtype)] is None, f"rank {rank}: {report[(collective, dtype)]}"
