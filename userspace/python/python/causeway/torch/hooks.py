"""DDP communication hooks that run the gradient allreduce on Causeway while
the job keeps another default backend (e.g. NCCL or Gloo for everything else)::

    import causeway.torch
    from causeway.torch.hooks import allreduce_hook

    cw = dist.new_group(backend="causeway")
    ddp = DistributedDataParallel(model)  # default group: any backend
    ddp.register_comm_hook(cw, allreduce_hook)

and one that compresses what crosses domains (the WAN), with error feedback::

    from causeway.torch.hooks import CompressionState, compressed_allreduce_hook

    ddp.register_comm_hook(CompressionState(cw, codec="bf16"), compressed_allreduce_hook)

Inside a domain the gradients stay full precision; only the bytes between
domains are encoded, and every rank ends with bit-identical gradients.
"""

from dataclasses import dataclass
from typing import Optional

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


def causeway_group(process_group: Optional[dist.ProcessGroup]):
    """The ``ProcessGroupCauseway`` behind ``process_group`` (``None``: the
    default group); ``TypeError`` if that group does not run on Causeway."""
    from causeway.torch._group import ProcessGroupCauseway

    pg = process_group if process_group is not None else dist.group.WORLD
    if isinstance(pg, ProcessGroupCauseway):
        return pg
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except (AttributeError, RuntimeError) as e:
        raise TypeError(f"process group {pg!r} has no CPU backend: {e}") from e
    if not isinstance(backend, ProcessGroupCauseway):
        raise TypeError(
            f"compressed_allreduce_hook needs a causeway group "
            f"(dist.new_group(backend='causeway')), not {type(backend).__name__}"
        )
    return backend


@dataclass
class CompressionState:
    """What ``compressed_allreduce_hook`` needs: the causeway group, the codec
    of the cross-domain bytes (``bf16``, ``fp16``, ``int8``, ``int8:256:stochastic``,
    ``topk:1%`` ..., as ``CAUSEWAY_WAN_CODEC``), and whether a lossy codec keeps
    what it dropped for the bucket's next step (error feedback; needed by top-k)."""

    process_group: Optional[dist.ProcessGroup] = None
    codec: str = "bf16"
    error_feedback: bool = True
    compressed: int = 0  # buckets sent compressed so far
    uncompressed: int = 0  # non-float32 buckets, sent exact


def compressed_allreduce_hook(
    state: CompressionState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket's gradients with ``state.codec`` across domains.

    Error feedback is keyed by the bucket's index and size, so DDP's bucket
    rebuild after its first step starts those residuals afresh. A bucket that
    is not float32 is averaged exactly (lossy codecs take float32 only)."""
    pg = causeway_group(state.process_group)
    buf = bucket.buffer()
    if buf.dtype != torch.float32:
        state.uncompressed += 1
        work = pg.allreduce([buf], dist.ReduceOp.AVG)
    else:
        state.compressed += 1
        key = (bucket.index() << 32 | buf.numel() & 0xFFFFFFFF) if state.error_feedback else None
        work = pg.allreduce_compressed(buf, "avg", state.codec, key)
    return work.get_future().then(lambda fut: fut.value()[0])
