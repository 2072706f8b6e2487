"""What the ranks of the tests run (importable by the spawned processes)."""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}
# Odd sizes (not multiples of the world, chunk or lane) for the element-wise ops.
N = 3001


def init(timeout_s=60.0):
    import causeway.torch  # noqa: F401  registers the backend

    dist.init_process_group("causeway", timeout=timedelta(seconds=timeout_s))
    return dist.new_group(backend="gloo")


def data(rank, dtype, n, for_prod=False, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype.is_floating_point:
        x = torch.rand(n, generator=g, dtype=torch.float64)
        x = 0.5 + x if for_prod else (x - 0.5) * 8
        return x.to(dtype)
    lo, hi = (0, 40) if dtype == torch.uint8 else (-40, 40)
    if for_prod:
        lo, hi = (1, 5) if dtype == torch.uint8 else (-4, 5)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def close(got, want, dtype, what):
    if dtype.is_floating_point:
        tol = {
            torch.float16: 3e-3,
            torch.bfloat16: 2e-2,
            torch.float32: 1e-5,
            torch.float64: 1e-12,
        }[dtype]
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")
    elif not torch.equal(got, want):
        bad = (got != want).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"{what}: differs at {bad}: {got[bad].tolist()} vs {want[bad].tolist()}")


def gloo_allreduce(x, op, world, gloo):
    """Gloo's result for `op` (Gloo has no AVG: its SUM divided as Causeway divides)."""
    ref = x.clone()
    dist.all_reduce(ref, op=dist.ReduceOp.SUM if op == "avg" else OPS[op], group=gloo)
    if op != "avg":
        return ref
    if ref.dtype.is_floating_point:
        return (ref.to(torch.float32) / world).to(ref.dtype) if ref.element_size() == 2 else ref / world
    return torch.div(ref, world, rounding_mode="trunc")


def case_allreduce(rank, world, dtype, gloo, op):
    x = data(rank, dtype, N, for_prod=op == "prod")
    want = gloo_allreduce(x, op, world, gloo)
    got = x.clone()
    dist.all_reduce(got, op=OPS[op])
    close(got, want, dtype, f"allreduce {op}")


def case_allreduce_noncontiguous(rank, world, dtype, gloo):
    views = (lambda b: b.t(), lambda b: b[:, ::2], lambda b: b[1::2])
    for view_of in views:
        base = data(rank, dtype, 6 * 101).reshape(6, 101)
        expected = base.clone()
        want = view_of(expected)
        assert not want.is_contiguous()
        reduced = want.contiguous()
        dist.all_reduce(reduced, group=gloo)
        want.copy_(reduced)  # `expected`: the view reduced, everything else as it was
        dist.all_reduce(view_of(base))
        close(base, expected, dtype, "allreduce of a non-contiguous view")


def case_broadcast(rank, world, dtype, gloo):
    x = data(rank, dtype, N)
    root = world - 1
    want = x.clone()
    dist.broadcast(want, root, group=gloo)
    got = x.clone()
    dist.broadcast(got, root)
    close(got, want, dtype, "broadcast")


def case_all_gather(rank, world, dtype, gloo):
    x = data(rank, dtype, 1001)
    want = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(want, x, group=gloo)
    got = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(got, x)
    for r in range(world):
        close(got[r], want[r], dtype, f"all_gather block {r}")


def case_all_gather_into_tensor(rank, world, dtype, gloo):
    x = data(rank, dtype, 1001)
    want = torch.empty(world * 1001, dtype=dtype)
    dist.all_gather_into_tensor(want, x, group=gloo)
    got = torch.empty(world * 1001, dtype=dtype)
    dist.all_gather_into_tensor(got, x)
    close(got, want, dtype, "all_gather_into_tensor")
    # In place: the input is this rank's block of the output (as FSDP calls it).
    inplace = torch.zeros(world * 1001, dtype=dtype)
    inplace[rank * 1001 : (rank + 1) * 1001] = x
    dist.all_gather_into_tensor(inplace, inplace[rank * 1001 : (rank + 1) * 1001])
    close(inplace, want, dtype, "all_gather_into_tensor in place")


def case_reduce_scatter_tensor(rank, world, dtype, gloo, op):
    n = 1001
    x = data(rank, dtype, world * n, for_prod=op == "prod")
    full = gloo_allreduce(x, op, world, gloo)
    got = torch.empty(n, dtype=dtype)
    before = x.clone()
    dist.reduce_scatter_tensor(got, x, op=OPS[op])
    close(got, full[rank * n : (rank + 1) * n], dtype, f"reduce_scatter_tensor {op}")
    assert torch.equal(x, before), "reduce_scatter_tensor changed its input"


def case_reduce_scatter(rank, world, dtype, gloo):
    n = 777
    xs = [data(rank, dtype, n, seed=s + 1) for s in range(world)]
    want = torch.empty(n, dtype=dtype)
    dist.reduce_scatter(want, [x.clone() for x in xs], group=gloo)
    got = torch.empty(n, dtype=dtype)
    dist.reduce_scatter(got, xs)
    close(got, want, dtype, "reduce_scatter")


def case_async(rank, world, dtype, gloo):
    xs = [data(rank, dtype, N, seed=s) for s in range(4)]
    wants = []
    for x in xs:
        w = x.clone()
        dist.all_reduce(w, group=gloo)
        wants.append(w)
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    seen = []
    futs = [
        w.get_future().then(lambda f, i=i: seen.append(i) or f.value()[0]) for i, w in enumerate(works)
    ]
    for f, x, want in zip(futs, xs, wants):
        assert f.wait() is x or torch.equal(f.wait(), x), "future's value is not the tensor"
        close(x, want, dtype, "async allreduce")
    assert sorted(seen) == [0, 1, 2, 3], seen
    assert all(w.is_completed() for w in works)


def compare_all(rank, world):
    """Every collective x dtype, Causeway's result against Gloo's in the same world."""
    gloo = init()
    report = {}

    def record(name, dtype_name, fn, *args):
        try:
            fn(rank, world, DTYPES[dtype_name], gloo, *args)
            report[(name, dtype_name)] = None
        except Exception as e:  # the test asserts on the report
            report[(name, dtype_name)] = f"{type(e).__name__}: {e}"

    for d in DTYPES:
        for op in OPS:
            record(f"allreduce_{op}", d, case_allreduce, op)
            record(f"reduce_scatter_tensor_{op}", d, case_reduce_scatter_tensor, op)
        record("allreduce_noncontiguous", d, case_allreduce_noncontiguous)
        record("broadcast", d, case_broadcast)
        record("all_gather", d, case_all_gather)
        record("all_gather_into_tensor", d, case_all_gather_into_tensor)
        record("reduce_scatter", d, case_reduce_scatter)
        record("async", d, case_async)
    dist.barrier()
    dist.destroy_process_group()
    return report


def init_only(timeout_s=60.0):
    import causeway.torch  # noqa: F401

    dist.init_process_group("causeway", timeout=timedelta(seconds=timeout_s))


def killed_rank(rank, world, victim, timeout_s):
    """The victim kills itself (SIGKILL) after one good allreduce; the others
    keep calling and must get a PeerError naming it, within the timeout. The
    survivors restore SIGPIPE's default action first: a write to the dead
    peer's socket must never raise it."""
    import signal

    import causeway

    init_only(timeout_s)
    x = torch.ones(1 << 18)
    dist.all_reduce(x)
    # The victim dies only once every survivor has its first result: in a
    # ring the victim can finish before a peer has received its last chunk.
    store = dist.distributed_c10d._get_default_store()
    store.set(f"killed_rank/done/{rank}", "1")
    if rank == victim:
        store.wait([f"killed_rank/done/{r}" for r in range(world) if r != victim])
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    start = time.monotonic()
    outcome = {}
    try:
        for _ in range(1000):
            dist.all_reduce(x)
        outcome["first"] = None
    except causeway.PeerError as e:
        outcome["first"] = (type(e).__name__, e.peer, e.kind, str(e))
    outcome["elapsed"] = time.monotonic() - start
    # Later calls fail at once too (async: through the Work), never hang.
    start = time.monotonic()
    work = dist.all_reduce(x, async_op=True)
    outcome["later"], outcome["mro"] = None, []
    try:
        work.wait()
    except causeway.CausewayError as e:
        outcome["later"] = type(e).__name__
        outcome["mro"] = [c.__name__ for c in type(e).__mro__]
    outcome["later_elapsed"] = time.monotonic() - start
    return outcome


def bad_config(rank, world):
    """Init is expected to raise; returns the exception's class names and text."""
    import causeway

    try:
        init_only(30)
    except causeway.CausewayError as e:
        return ([c.__name__ for c in type(e).__mro__], str(e), e.kind)
    dist.destroy_process_group()
    return None


def unsupported(rank, world):
    init_only()
    out = {}
    x = torch.ones(4)
    for name, call in {
        "BAND": lambda: dist.all_reduce(x, op=dist.ReduceOp.BAND),
        "BXOR": lambda: dist.all_reduce(x, op=dist.ReduceOp.BXOR),
        "int8": lambda: dist.all_reduce(torch.ones(4, dtype=torch.int8)),
        "bool": lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)),
        "send": lambda: dist.send(x, dst=(rank + 1) % world),
        "all_to_all_single": lambda: dist.all_to_all_single(torch.empty(4), x),
        "gather": lambda: dist.gather(x, [torch.empty(4) for _ in range(world)] if rank == 0 else None, dst=0),
    }.items():
        try:
            call()
            out[name] = None
        except NotImplementedError as e:
            out[name] = str(e)
    # The group still works after the refusals.
    dist.all_reduce(x)
    out["after"] = x.tolist()
    dist.destroy_process_group()
    return out


def zero_copy(rank, world):
    """The native module sees the tensor's own memory (no copy), and staging
    happens only for non-contiguous tensors."""
    import causeway._causeway as native
    from causeway.torch import _tensors

    init_only()
    out = {}
    for name, dtype in DTYPES.items():
        t = torch.zeros(1000, dtype=dtype)
        addr, n, _ = native._dlpack_view(t.__dlpack__())
        with _tensors.host(t) as h:
            out[name] = (addr == t.data_ptr(), n == 1000, h.data_ptr() == t.data_ptr())
    v = torch.zeros(10, 10).t()
    with _tensors.host(v) as h:
        out["noncontiguous_staged"] = h.data_ptr() != v.data_ptr() and h.is_contiguous()
    dist.destroy_process_group()
    return out


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )


def ddp_matches_gloo(rank, world, steps):
    """The same model trained three ways in one world: DDP over the causeway
    group, DDP over a Gloo group, and DDP over Gloo with Causeway's comm hook.
    Returns how far the parameters ended apart and how many allreduces
    Causeway ran."""
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    from causeway.torch import ProcessGroupCauseway
    from causeway.torch.hooks import allreduce_hook

    gloo = init()
    calls = []
    original = ProcessGroupCauseway.allreduce

    def counting(self, tensors, opts=None):
        calls.append(sum(t.numel() for t in tensors))
        return original(self, tensors, opts)

    ProcessGroupCauseway.allreduce = counting
    base = _model(0)
    models = {name: copy.deepcopy(base) for name in ("causeway", "gloo", "hook")}
    # Small buckets: several allreduces per backward, issued while it runs.
    ddps = {
        "causeway": DDP(models["causeway"], bucket_cap_mb=0.01),
        "gloo": DDP(models["gloo"], process_group=gloo, bucket_cap_mb=0.01),
        "hook": DDP(models["hook"], process_group=gloo, bucket_cap_mb=0.01),
    }
    ddps["hook"].register_comm_hook(dist.group.WORLD, allreduce_hook)
    opts = {n: torch.optim.SGD(m.parameters(), lr=0.1) for n, m in ddps.items()}
    start_calls = len(calls)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        for name, ddp in ddps.items():
            opts[name].zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opts[name].step()
    diff = {
        name: max(
            (a - b).abs().max().item()
            for a, b in zip(models[name].parameters(), models["gloo"].parameters())
        )
        for name in ("causeway", "hook")
    }
    moved = max((a - b).abs().max().item() for a, b in zip(models["gloo"].parameters(), base.parameters()))
    ProcessGroupCauseway.allreduce = original
    dist.destroy_process_group()
    return {"diff": diff, "moved": moved, "allreduces": len(calls) - start_calls}


def compressed_hook(rank, world, steps):
    """DDP with ``compressed_allreduce_hook`` (bf16, and top-k with error
    feedback) beside DDP over Gloo, in a world of two domains. Returns each
    model's flattened parameters, its loss before and after, and the hook
    state's counters."""
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    from causeway.torch.hooks import CompressionState, compressed_allreduce_hook

    gloo = init()
    base = _model(0)
    names = ("gloo", "bf16", "topk")
    models = {n: copy.deepcopy(base) for n in names}
    ddps = {n: DDP(models[n], process_group=gloo, bucket_cap_mb=0.01) for n in names}
    states = {
        "bf16": CompressionState(dist.group.WORLD, codec="bf16"),
        "topk": CompressionState(dist.group.WORLD, codec="topk:10%", error_feedback=True),
    }
    for n, st in states.items():
        ddps[n].register_comm_hook(st, compressed_allreduce_hook)
    opts = {n: torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9) for n, m in ddps.items()}

    def labels(x):  # a rule the model can learn
        return (x[:, :4].argmax(dim=1) + (x[:, 4] > 1).long()) % 4

    g = torch.Generator().manual_seed(7)
    x_eval = torch.randn(512, 32, generator=g)
    y_eval = labels(x_eval)

    def loss(m):
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(m(x_eval), y_eval).item()

    before = {n: loss(m) for n, m in models.items()}
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(64, 32, generator=g)
        y = labels(x)
        for n, ddp in ddps.items():
            opts[n].zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opts[n].step()
    flat = {n: torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for n, m in models.items()}
    out = {
        "params": {n: f.numpy().tobytes() for n, f in flat.items()},
        "diff": {n: (flat[n] - flat["gloo"]).abs().max().item() for n in states},
        "before": before,
        "after": {n: loss(m) for n, m in models.items()},
        "compressed": {n: st.compressed for n, st in states.items()},
    }
    dist.destroy_process_group()
    return out


def wait_timeout(rank, world, late_s):
    """Rank 0's allreduce waits for a rank that calls ``late_s`` later:
    ``Work.wait(timeout=...)`` shorter than that raises a timeout at once,
    and a later ``wait()`` completes the operation correctly."""
    import causeway

    init_only(60.0)
    x = torch.full((1024,), float(rank + 1))
    out = {}
    if rank != 0:
        time.sleep(late_s)
    work = dist.all_reduce(x, async_op=True)
    if rank == 0:
        start = time.monotonic()
        try:
            work.wait(timeout=timedelta(seconds=0.3))
            out["timed_out"] = None
        except causeway.CausewayTimeoutError as e:
            out["timed_out"] = (str(e), [c.__name__ for c in type(e).__mro__])
        out["timeout_elapsed"] = time.monotonic() - start
    work.wait()
    out["sum_ok"] = bool((x == sum(range(1, world + 1))).all())
    dist.destroy_process_group()
    return out
