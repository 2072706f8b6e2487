"""The ``causeway`` backend of ``torch.distributed``.

``import causeway.torch`` registers it; then, under torchrun (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, plus ``CAUSEWAY_DOMAIN``)::

    dist.init_process_group("causeway")
    model = torch.nn.parallel.DistributedDataParallel(model)

Supported: allreduce (SUM, AVG, PRODUCT, MIN, MAX), broadcast, all_gather,
all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, barrier, on
float32, float64, float16, bfloat16, int32, int64 and uint8 tensors; every
call is asynchronous (``async_op=True`` gives a ``Work`` whose
``get_future()`` completes with the output tensors). Anything else raises
``NotImplementedError`` naming it. Options: the ``CAUSEWAY_*`` variables of
the collective library; torch's ``timeout`` applies unless
``CAUSEWAY_TIMEOUT`` is set.
"""

import torch
import torch.distributed as dist

from causeway.torch._group import ProcessGroupCauseway

BACKEND = "causeway"


def _create(opts, backend_options=None):
    ranks = list(opts.global_ranks_in_group or [])
    global_rank = ranks[opts.group_rank] if ranks else None
    return ProcessGroupCauseway(
        opts.store, opts.group_rank, opts.group_size, opts.timeout, global_rank=global_rank
    )


def _register() -> None:
    if BACKEND.upper() in dist.Backend._plugins:
        return
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")  # staged through pinned host memory
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=devices)


_register()

__all__ = ["BACKEND", "ProcessGroupCauseway"]
