"""Tensors as the native module takes them: contiguous host memory, passed by
DLPack (no copy). What torch asks that Causeway does not do raises
``NotImplementedError`` naming it."""

import contextlib

import torch
from torch.distributed import ReduceOp

# The element types Causeway reduces (and gathers, broadcasts).
DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.uint8,
)

_OPS = {
    ReduceOp.RedOpType.SUM: "sum",
    ReduceOp.RedOpType.AVG: "avg",
    ReduceOp.RedOpType.PRODUCT: "prod",
    ReduceOp.RedOpType.MIN: "min",
    ReduceOp.RedOpType.MAX: "max",
}


def reduce_op_name(op) -> str:
    """Causeway's name of a torch ``ReduceOp`` (or the options holding one)."""
    op = getattr(op, "reduceOp", op)
    kind = getattr(op, "op", op)
    try:
        return _OPS[kind]
    except (KeyError, TypeError):
        name = getattr(kind, "name", str(kind))
        raise NotImplementedError(
            f"causeway backend: ReduceOp.{name} is not supported "
            "(supported: SUM, AVG, PRODUCT, MIN, MAX)"
        ) from None


def check(tensor: torch.Tensor, what: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"causeway backend: {what} must be a tensor, not {type(tensor).__name__}")
    if tensor.dtype not in DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in DTYPES)
        raise NotImplementedError(
            f"causeway backend: {what} has dtype {tensor.dtype}, not one of {names}"
        )
    if tensor.is_sparse:
        raise NotImplementedError(f"causeway backend: {what} is sparse")
    if tensor.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(
            f"causeway backend: {what} is on {tensor.device}, only cpu (and cuda, staged) tensors"
        )


def single(tensors, what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise NotImplementedError(
            f"causeway backend: {what} of {len(tensors)} tensors per call (one per process only)"
        )
    return tensors[0]


@contextlib.contextmanager
def host(tensor: torch.Tensor, copy_in: bool = True, copy_out: bool = True):
    """Yields contiguous host memory for ``tensor``: the tensor itself when it
    is a contiguous CPU tensor (zero-copy), else a staging copy (pinned host
    memory for CUDA tensors) that is written back on success."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        yield tensor.detach()
        return
    pinned = tensor.device.type == "cuda"
    staged = torch.empty(
        tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=pinned
    )
    if copy_in:
        staged.copy_(tensor.detach())
    yield staged
    if copy_out:
        with torch.no_grad():
            tensor.copy_(staged)


def capsule(tensor: torch.Tensor):
    """The DLPack capsule of a contiguous host tensor (its own memory)."""
    return tensor.__dlpack__()
