"""DDP communication hooks that run the gradient allreduce on Causeway while
the job keeps another default backend (e.g. NCCL or Gloo for everything else)::

    import causeway.torch
    from causeway.torch.hooks import allreduce_hook

    cw = dist.new_group(backend="causeway")
    ddp = DistributedDataParallel(model)  # default group: any backend
    ddp.register_comm_hook(cw, allreduce_hook)
"""

import torch
import torch.distributed as dist


def allreduce_hook(
    process_group: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket's gradients over ``process_group`` (a causeway
    group; ``None`` means the default group) asynchronously, in place."""
    buf = bucket.buffer()
    work = dist.all_reduce(buf, op=dist.ReduceOp.AVG, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
