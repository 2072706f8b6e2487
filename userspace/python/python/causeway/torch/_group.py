"""``ProcessGroupCauseway``: a ``torch.distributed.ProcessGroup`` whose
collectives run on Causeway.

Every operation is queued to one worker thread per group (collectives must run
in the order they were issued) and returns at once with a ``CausewayWork``
around a ``torch.futures.Future``; the worker calls into Rust with the GIL released, so
Python (autograd, DDP's next bucket) goes on meanwhile. Contiguous CPU tensors
are used in place (DLPack); others are staged (see ``_tensors.host``).
"""

import os
import queue
import socket
import threading
from datetime import timedelta

import torch
from torch.distributed import ProcessGroup, Work

import causeway
from causeway.torch import _tensors as T

STORE_KEY = "causeway/bootstrap-store"


def _store_key() -> str:
    """Where rank 0 publishes its store's address in torch's store. Elastic
    torchrun keeps the keys of earlier attempts after a restart, so the key
    names the attempt (``TORCHELASTIC_RESTART_COUNT``): a restarted rank
    never dials the dead store of the attempt before."""
    return f"{STORE_KEY}/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _listen_ip() -> str:
    """The address rank 0's bootstrap store listens on: ``CAUSEWAY_ADDR``, else
    the local address that routes to ``MASTER_ADDR``, else the host name's."""
    if os.environ.get("CAUSEWAY_ADDR"):
        return os.environ["CAUSEWAY_ADDR"]
    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((master, int(os.environ.get("MASTER_PORT") or 1)))
                return s.getsockname()[0]
        except (OSError, ValueError):
            pass
    return socket.gethostbyname(socket.gethostname())


def _timeout_s(timeout) -> "float | None":
    """``CAUSEWAY_TIMEOUT`` when set (the library reads it), else torch's."""
    if os.environ.get("CAUSEWAY_TIMEOUT"):
        return None
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout) if timeout else None


class CausewayWork(Work):
    """An operation in flight. ``wait()`` raises the operation's error (a
    ``causeway.PeerError`` naming a dead rank, ...); ``get_future()`` completes
    with the output tensors, or with that error."""

    def __init__(self, fut: torch.futures.Future):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None) -> bool:
        """Waits for the operation and raises its error. With ``timeout`` (a
        ``timedelta`` or seconds), raises ``causeway.CausewayTimeoutError`` if
        it has not finished by then; the operation itself goes on (the
        communicator's own timeout still ends it if a peer is gone)."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if seconds is not None and seconds > 0 and not self._fut.done():
            done = threading.Event()
            self._fut.add_done_callback(lambda _: done.set())
            if not done.wait(seconds):
                raise causeway.CausewayTimeoutError(
                    f"causeway: operation not finished after {seconds:g} s (Work.wait timeout)"
                )
        self._fut.wait()  # raises the operation's exception
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:
            return False
        return True

    def exception(self):
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except Exception as e:
            return e
        return None

    def result(self):
        return self._fut.value()

    def synchronize(self) -> None:
        self.wait()


class ProcessGroupCauseway(ProcessGroup):
    """Made by ``dist.init_process_group("causeway")`` / ``dist.new_group(backend="causeway")``.

    Bootstraps through the c10d ``store`` torch hands it: rank 0 starts
    Causeway's store on a port the kernel picks and publishes its address
    under ``causeway/bootstrap-store/attempt-N``; the others read it (so a torchrun job
    needs no second fixed port).
    """

    def __init__(self, store, rank: int, size: int, timeout, global_rank=None):
        super().__init__(rank, size)
        self._server = None
        if rank == 0:
            self._server = causeway.StoreServer(_listen_ip())
            store.set(_store_key(), self._server.addr)
        addr = store.get(_store_key()).decode()
        domain = os.environ.get("CAUSEWAY_DOMAIN") or None
        topology = os.environ.get("CAUSEWAY_TOPOLOGY")
        if domain is None and topology:
            domain = causeway.domain_from_topology(
                topology, rank if global_rank is None else global_rank
            )
        try:
            self._comm = causeway.Communicator(
                rank,
                size,
                addr,
                domain=domain,
                host_id=os.environ.get("CAUSEWAY_HOST_ID") or None,
                listen_ip=os.environ.get("CAUSEWAY_ADDR") or None,
                timeout_s=_timeout_s(timeout),
            )
        except causeway.CausewayError:
            # The others may still be reading this failure from our store.
            if self._server is not None:
                self._server.linger(size)
            raise
        self._queue = queue.SimpleQueue()
        self._worker = threading.Thread(
            target=self._run, name=f"causeway-pg-{rank}", daemon=True
        )
        self._worker.start()

    def getBackendName(self) -> str:
        return "causeway"

    def _get_backend_name(self) -> str:
        return "causeway"

    def name(self) -> str:
        return "causeway"

    # -- the worker ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, fut, result = item
            try:
                job()
            except BaseException as e:  # handed to the waiter, never lost
                fut.set_exception(e)
            else:
                fut.set_result(result)

    def _submit(self, job, result) -> CausewayWork:
        fut = torch.futures.Future()
        self._queue.put((job, fut, result))
        return CausewayWork(fut)

    def shutdown(self) -> None:
        """Finishes queued operations, then closes the communicator."""
        if self._worker.is_alive():
            self._queue.put(None)
            self._worker.join()
        self._comm.close()

    def abort(self) -> None:
        self.shutdown()

    # -- collectives --------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        op = T.reduce_op_name(opts if opts is not None else torch.distributed.ReduceOp.SUM)
        t = T.single(tensors, "allreduce")
        T.check(t, "allreduce tensor")

        def job():
            with T.host(t) as h:
                self._comm.allreduce(T.capsule(h), op)

        return self._submit(job, [t])

    def allreduce_compressed(self, tensor, op="avg", codec="bf16", feedback=None):
        """Allreduce of one float32 CPU tensor in place whose cross-domain
        bytes go through ``codec`` (``bf16``, ``fp16``, ``int8``, ``topk:1%``,
        ... as ``CAUSEWAY_WAN_CODEC``). ``feedback`` (an int naming the tensor
        across calls) keeps what a lossy codec dropped and sends it next time.
        Every rank must pass the same codec and key. Returns a ``Work``."""
        T.check(tensor, "allreduce_compressed tensor")
        if op not in ("sum", "avg"):
            raise ValueError(f"allreduce_compressed: op {op!r} is not 'sum' or 'avg'")

        def job():
            with T.host(tensor) as h:
                self._comm.allreduce(T.capsule(h), op, codec=codec, feedback=feedback)

        return self._submit(job, [tensor])

    def allreduce_coalesced(self, tensors, opts=None):
        op = T.reduce_op_name(opts if opts is not None else torch.distributed.ReduceOp.SUM)
        for t in tensors:
            T.check(t, "allreduce_coalesced tensor")

        def job():
            for t in tensors:
                with T.host(t) as h:
                    self._comm.allreduce(T.capsule(h), op)

        return self._submit(job, list(tensors))

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        if opts is not None and getattr(opts, "rootTensor", 0) != 0:
            raise NotImplementedError("causeway backend: broadcast with rootTensor != 0")
        t = T.single(tensors, "broadcast")
        T.check(t, "broadcast tensor")

        def job():
            with T.host(t) as h:
                self._comm.broadcast(T.capsule(h), root)

        return self._submit(job, [t])

    def all_gather_single(self, output, input, opts=None):
        T.check(output, "all_gather_into_tensor output")
        T.check(input, "all_gather_into_tensor input")
        if output.numel() != input.numel() * self.size():
            raise ValueError(
                f"all_gather_into_tensor: output has {output.numel()} elements, "
                f"expected {self.size()} x {input.numel()}"
            )

        def job():
            with T.host(output, copy_in=False) as o, T.host(input, copy_out=False) as i:
                self._comm.allgather(T.capsule(i), T.capsule(o))

        return self._submit(job, [output])

    _allgather_base = all_gather_single

    def allgather(self, output_lists, inputs, opts=None):
        if isinstance(inputs, torch.Tensor):
            inputs = [inputs]
        t = T.single(inputs, "all_gather")
        outs = T.single(output_lists, "all_gather")
        T.check(t, "all_gather input")
        if len(outs) != self.size():
            raise ValueError(f"all_gather: {len(outs)} output tensors for {self.size()} ranks")
        for o in outs:
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise ValueError("all_gather: every output tensor must match the input's size and dtype")

        def job():
            flat = torch.empty(t.numel() * self.size(), dtype=t.dtype)
            with T.host(t, copy_out=False) as i:
                self._comm.allgather(T.capsule(i), T.capsule(flat))
            with torch.no_grad():
                for r, o in enumerate(outs):
                    o.copy_(flat[r * t.numel() : (r + 1) * t.numel()].view(o.shape))

        return self._submit(job, list(outs))

    def reduce_scatter_single(self, output, input, opts=None):
        op = T.reduce_op_name(opts if opts is not None else torch.distributed.ReduceOp.SUM)
        T.check(output, "reduce_scatter_tensor output")
        T.check(input, "reduce_scatter_tensor input")
        if input.numel() != output.numel() * self.size():
            raise ValueError(
                f"reduce_scatter_tensor: input has {input.numel()} elements, "
                f"expected {self.size()} x {output.numel()}"
            )

        def job():
            with T.host(output, copy_in=False) as o, T.host(input, copy_out=False) as i:
                self._comm.reduce_scatter(T.capsule(i), T.capsule(o), op)

        return self._submit(job, [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = T.reduce_op_name(opts if opts is not None else torch.distributed.ReduceOp.SUM)
        out = T.single(outputs, "reduce_scatter")
        ins = T.single(input_lists, "reduce_scatter")
        T.check(out, "reduce_scatter output")
        if len(ins) != self.size():
            raise ValueError(f"reduce_scatter: {len(ins)} input tensors for {self.size()} ranks")
        for i in ins:
            if i.numel() != out.numel() or i.dtype != out.dtype:
                raise ValueError("reduce_scatter: every input tensor must match the output's size and dtype")

        def job():
            flat = torch.cat([i.detach().reshape(-1) for i in ins])
            with T.host(out, copy_in=False) as o:
                self._comm.reduce_scatter(T.capsule(flat), T.capsule(o), op)

        return self._submit(job, [out])

    def barrier(self, opts=None):
        return self._submit(self._comm.barrier, [])

    # -- what Causeway does not do (yet) ------------------------------------

    def _unsupported(name):
        def method(self, *args, **kwargs):
            raise NotImplementedError(f"causeway backend: {name} is not supported yet")

        method.__name__ = name
        return method

    for _name in (
        "send",
        "recv",
        "recv_anysource",
        "reduce",
        "gather",
        "gather_single",
        "gather_into_tensor",
        "scatter",
        "alltoall",
        "alltoall_base",
        "all_to_all_single",
        "allgather_coalesced",
        "all_gather_single_coalesced",
        "allgather_into_tensor_coalesced",
        "reduce_scatter_single_coalesced",
        "reduce_scatter_tensor_coalesced",
        "monitored_barrier",
        "split_group",
        "merge_remote_group",
        "_start_coalescing",
        "_end_coalescing",
    ):
        locals()[_name] = _unsupported(_name)
    del _name, _unsupported
