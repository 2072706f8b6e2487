//! `Communicator` and `StoreServer` for Python. Every operation works in the
//! tensor's own memory (a DLPack capsule, see [`crate::dlpack`]) and runs with
//! the GIL released, so Python threads (the torch backend's worker) go on
//! while Rust moves the data.
#![allow(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use causeway_collective::codec::CodecSpec;
use causeway_collective::store::StoreServer as RustStore;
use causeway_collective::{
    CallOptions, CollectiveError, Communicator as RustComm, DType, Element, Options, ReduceOp,
};
use half::{bf16, f16};
use pyo3::prelude::*;

use crate::dlpack::{self, View};
use crate::errors::{argument, to_py};

/// Rank 0's bootstrap store on a port the kernel picks. Its address is what the
/// other ranks need (the torch backend hands it around through torch's store).
#[pyclass(module = "causeway._causeway", frozen)]
pub struct StoreServer {
    inner: RustStore,
}

#[pymethods]
impl StoreServer {
    /// Listens on `ip` (an address the other ranks reach), port chosen by the kernel.
    #[new]
    fn new(ip: &str) -> PyResult<Self> {
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| argument(format!("store address {ip:?} is not an IP address")))?;
        let inner = RustStore::bind(SocketAddr::new(ip, 0))
            .map_err(|e| to_py(CollectiveError::Store(e)))?;
        Ok(StoreServer { inner })
    }

    /// `"IP:PORT"` to pass to `Communicator(store_addr=...)`.
    #[getter]
    fn addr(&self) -> String {
        self.inner.addr().to_string()
    }

    /// After a failed set-up: keeps serving until all `world` ranks have
    /// connected and left (at most a couple of seconds), so every rank reads
    /// the same failure instead of losing the store. Releases the GIL.
    fn linger(&self, py: Python<'_>, world: usize) {
        py.detach(|| {
            self.inner
                .linger(world, 0, causeway_collective::store::LINGER)
        });
    }
}

/// A communicator; see the `causeway` package docs. Closed by `close()` (or
/// when garbage collected).
#[pyclass(module = "causeway._causeway", frozen)]
pub struct Communicator {
    inner: Mutex<Option<Arc<RustComm>>>,
    rank: usize,
    world: usize,
}

fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    Ok(match name {
        "sum" => ReduceOp::Sum,
        "avg" => ReduceOp::Avg,
        "min" => ReduceOp::Min,
        "max" => ReduceOp::Max,
        "prod" => ReduceOp::Prod,
        _ => {
            return Err(argument(format!(
                "reduce op {name:?} is not one of sum, avg, min, max, prod"
            )))
        }
    })
}

/// Runs `$body` with `$t` bound to the element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $t:ident, $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::F16 => {
                type $t = f16;
                $body
            }
            DType::Bf16 => {
                type $t = bf16;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
        }
    };
}

/// The slice a [`View`] of `T` describes.
///
/// # Safety
/// `v` must come from [`dlpack::view`] with `v.dtype == T::DTYPE`, its capsule
/// must stay alive for `'a`, and no other slice of the same memory may be live
/// while this one is.
unsafe fn slice<'a, T: Element>(v: View) -> &'a mut [T] {
    debug_assert_eq!(v.dtype, T::DTYPE);
    if v.len == 0 {
        return &mut [];
    }
    // SAFETY: `dlpack::view` checked that `ptr` is aligned for `T` and that
    // `len` elements of contiguous host memory follow it; the caller keeps the
    // capsule (hence the tensor's storage) alive and the memory unaliased.
    unsafe { std::slice::from_raw_parts_mut(v.ptr.cast::<T>(), v.len) }
}

/// This call's options: `codec` names what crosses domains (as
/// `CAUSEWAY_WAN_CODEC`; `None`: the communicator's default), `feedback` the
/// tensor whose error-feedback residual a lossy codec keeps.
fn call_options(codec: Option<&str>, feedback: Option<u64>) -> PyResult<CallOptions> {
    let codec = codec
        .map(|c| {
            CodecSpec::parse(c)
                .and_then(|s| s.validate())
                .map_err(|e| argument(format!("codec {c:?}: {e}")))
        })
        .transpose()?;
    Ok(CallOptions { codec, feedback })
}

fn same_dtype(a: &View, b: &View, what: &str) -> PyResult<()> {
    if a.dtype != b.dtype {
        return Err(argument(format!(
            "{what}: input is {:?}, output {:?}",
            a.dtype, b.dtype
        )));
    }
    Ok(())
}

impl Communicator {
    fn get(&self) -> PyResult<Arc<RustComm>> {
        let guard = self
            .inner
            .lock()
            .map_err(|_| to_py(CollectiveError::Closed))?;
        guard.clone().ok_or_else(|| to_py(CollectiveError::Closed))
    }
}

#[pymethods]
impl Communicator {
    /// Joins the communicator of `world` ranks whose bootstrap store
    /// (a `StoreServer`) listens at `store_addr`. Options come from the
    /// `CAUSEWAY_*` variables; `domain` is this rank's (as `CAUSEWAY_DOMAIN`;
    /// `None`: the job is one domain unless no rank names one).
    #[new]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    #[pyo3(signature = (rank, world, store_addr, domain=None, host_id=None, listen_ip=None, timeout_s=None))]
    fn new(
        py: Python<'_>,
        rank: usize,
        world: usize,
        store_addr: &str,
        domain: Option<String>,
        host_id: Option<String>,
        listen_ip: Option<String>,
        timeout_s: Option<f64>,
    ) -> PyResult<Self> {
        let master: SocketAddr = store_addr
            .parse()
            .map_err(|_| argument(format!("store address {store_addr:?} is not IP:PORT")))?;
        let mut opts = Options::from_env().map_err(|e| to_py(e.into()))?;
        if let Some(t) = timeout_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(argument(format!("timeout {t} s must be positive")));
            }
            opts.timeout = std::time::Duration::from_secs_f64(t);
        }
        let mut b = RustComm::builder(rank, world)
            .master(master)
            .host_store(false)
            .options(opts);
        if let Some(d) = domain {
            b = b.domain(d);
        }
        if let Some(h) = host_id {
            b = b.host_id(h);
        }
        if let Some(ip) = listen_ip {
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| argument(format!("listen address {ip:?} is not an IP address")))?;
            b = b.listen_ip(ip);
        }
        let comm = py.detach(move || b.build()).map_err(to_py)?;
        Ok(Communicator {
            inner: Mutex::new(Some(Arc::new(comm))),
            rank,
            world,
        })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }
    #[getter]
    fn world_size(&self) -> usize {
        self.world
    }

    /// The domain label `rank` registered with.
    fn domain_of(&self, rank: usize) -> PyResult<Option<String>> {
        Ok(self.get()?.domain_of(rank).map(str::to_string))
    }

    /// In-place allreduce of a tensor (`op`: sum, avg, min, max, prod).
    /// `codec` compresses what crosses domains (`bf16`, `int8`, `topk:1%`, ...;
    /// lossy ones take float32 tensors), `feedback` keys its error feedback.
    #[pyo3(signature = (tensor, op, codec=None, feedback=None))]
    fn allreduce(
        &self,
        py: Python<'_>,
        tensor: &Bound<'_, PyAny>,
        op: &str,
        codec: Option<&str>,
        feedback: Option<u64>,
    ) -> PyResult<()> {
        let v = dlpack::view(tensor, "allreduce")?;
        let op = reduce_op(op)?;
        let call = call_options(codec, feedback)?;
        let comm = self.get()?;
        py.detach(move || {
            with_element!(v.dtype, T, {
                // SAFETY: `tensor` (the capsule) is borrowed by this call until
                // `detach` returns; this is the only slice of its memory.
                let buf = unsafe { slice::<T>(v) };
                comm.allreduce_with(buf, op, &call)
            })
        })
        .map_err(to_py)
    }

    /// Forgets the error-feedback residual of tensor `feedback` (all of them
    /// with `None`), in order with the calls before it. Local to this rank.
    #[pyo3(signature = (feedback=None))]
    fn reset_feedback(&self, py: Python<'_>, feedback: Option<u64>) -> PyResult<()> {
        let comm = self.get()?;
        py.detach(move || comm.reset_feedback(feedback))
            .map_err(to_py)
    }

    /// In-place broadcast of `root`'s tensor.
    fn broadcast(&self, py: Python<'_>, tensor: &Bound<'_, PyAny>, root: usize) -> PyResult<()> {
        let v = dlpack::view(tensor, "broadcast")?;
        let comm = self.get()?;
        py.detach(move || {
            // SAFETY: as in `allreduce`.
            with_element!(v.dtype, T, comm.broadcast(unsafe { slice::<T>(v) }, root))
        })
        .map_err(to_py)
    }

    /// Gathers every rank's `input` into `output` (world × input elements,
    /// rank r's block at r × len(input)). `input` may be this rank's block of
    /// `output` itself (in place) but may not overlap it otherwise.
    fn allgather(
        &self,
        py: Python<'_>,
        input: &Bound<'_, PyAny>,
        output: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (i, o) = (
            dlpack::view(input, "allgather input")?,
            dlpack::view(output, "allgather output")?,
        );
        same_dtype(&i, &o, "allgather")?;
        if o.len != i.len * self.world {
            return Err(argument(format!(
                "allgather: output has {} elements, expected world size {} × {}",
                o.len, self.world, i.len
            )));
        }
        let block = i.len * i.dtype.size();
        let mine = o.ptr.wrapping_add(self.rank * block);
        if i.overlaps(&o) && i.ptr != mine {
            return Err(argument(
                "allgather: input overlaps output other than as this rank's block".into(),
            ));
        }
        let (rank, comm) = (self.rank, self.get()?);
        py.detach(move || {
            let (i, o) = (i, o); // whole `View`s (which are `Send`), not their pointer fields
            let mine = o.ptr.wrapping_add(rank * block);
            if i.ptr != mine {
                // SAFETY: both ranges are valid (checked views, capsules
                // borrowed for this call) and do not overlap (checked above).
                unsafe { std::ptr::copy_nonoverlapping(i.ptr, mine, block) };
            }
            with_element!(o.dtype, T, {
                // SAFETY: as in `allreduce`; the input is not read from here on.
                let out = unsafe { slice::<T>(o) };
                comm.allgather_in_place(out)
            })
        })
        .map_err(to_py)
    }

    /// Reduces `input` (world × len(output) elements) across ranks and leaves
    /// this rank's block in `output`; `input` is left unchanged (it is copied
    /// once, as the reduction needs scratch space of its size).
    #[pyo3(signature = (input, output, op, codec=None, feedback=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        input: &Bound<'_, PyAny>,
        output: &Bound<'_, PyAny>,
        op: &str,
        codec: Option<&str>,
        feedback: Option<u64>,
    ) -> PyResult<()> {
        let (i, o) = (
            dlpack::view(input, "reduce_scatter input")?,
            dlpack::view(output, "reduce_scatter output")?,
        );
        same_dtype(&i, &o, "reduce_scatter")?;
        if i.len != o.len * self.world {
            return Err(argument(format!(
                "reduce_scatter: input has {} elements, expected world size {} × {}",
                i.len, self.world, o.len
            )));
        }
        let op = reduce_op(op)?;
        let call = call_options(codec, feedback)?;
        let (rank, comm) = (self.rank, self.get()?);
        py.detach(move || {
            with_element!(i.dtype, T, {
                // SAFETY: as in `allreduce`; the input slice ends before the
                // output slice (which may alias it) is made.
                let mut work: Vec<T> = unsafe { slice::<T>(i) }.to_vec();
                comm.reduce_scatter_in_place_with(&mut work, op, &call)?;
                let shard = comm.shard(work.len(), rank);
                // SAFETY: as in `allreduce`.
                unsafe { slice::<T>(o) }.copy_from_slice(&work[shard]);
                Ok(())
            })
        })
        .map_err(to_py)
    }

    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let comm = self.get()?;
        py.detach(move || comm.barrier()).map_err(to_py)
    }

    /// Says goodbye to every peer and stops (waits for queued operations).
    /// Later calls raise `CausewayError` (closed).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let comm = self
            .inner
            .lock()
            .map_err(|_| to_py(CollectiveError::Closed))?
            .take();
        py.detach(move || drop(comm));
        Ok(())
    }
}
