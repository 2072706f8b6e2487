//! The only `unsafe` of the RDMA transport: thin owners of libibverbs
//! objects (device context + protection domain, memory regions, a completion
//! channel + CQ + RC queue pair), called through `ibverbs::ffi`.
//!
//! The `ibverbs` crate's safe API ties every object to a borrow of its parent
//! (`QueuePair<'res>`) and registers only memory it allocates itself; this
//! transport needs owned objects shared by three threads, registration of the
//! library's own buffers, the completion channel and RDMA WRITE WITH IMM, so
//! it uses the crate's raw bindings. Every owner frees its object in `Drop`,
//! children before parents (each holds an `Arc` of its parent).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use ibverbs_sys as ffi;

use super::error::RdmaError;
use super::ConnInfo;

/// The port every Soft-RoCE (and single-port RoCE) device uses.
pub const PORT: u8 = 1;

fn last_os(call: &str) -> String {
    format!("{call}: {}", io::Error::last_os_error())
}

/// An open device with its protection domain.
pub struct Device {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    pub name: String,
    /// The port's active MTU (`ibv_mtu` enum value: 1 = 256 … 5 = 4096).
    pub mtu: u32,
}

// SAFETY: libibverbs contexts and PDs may be used from any thread (the
// library and providers lock internally); the pointers are only freed in Drop.
unsafe impl Send for Device {}
// SAFETY: as for Send: every call through `&Device` is a thread-safe verb.
unsafe impl Sync for Device {}

impl Device {
    /// Opens the device called `name` and checks that its port is active.
    pub fn open(name: &str) -> Result<Arc<Device>, RdmaError> {
        let mut n = 0i32;
        // SAFETY: ibv_get_device_list writes the count into `n` and returns an
        // array of `n` device pointers (or null), freed below after use.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(RdmaError::NoDevice(last_os("ibv_get_device_list")));
        }
        let mut ctx = ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: `i < n`, so the entry is a valid device pointer of the list.
            let dev = unsafe { *list.add(i) };
            // SAFETY: `dev` is valid while the list is; the name is a C string it owns.
            let dev_name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if dev_name.to_string_lossy() == name {
                // SAFETY: opening a listed device; the context outlives the list.
                ctx = unsafe { ffi::ibv_open_device(dev) };
                break;
            }
        }
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { ffi::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(RdmaError::NoDevice(format!(
                "cannot open {name}: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: the context is open; the PD is freed in Drop before the context.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            let e = last_os("ibv_alloc_pd");
            // SAFETY: the context was opened above and nothing else uses it.
            unsafe { ffi::ibv_close_device(ctx) };
            return Err(RdmaError::NoDevice(format!("{name}: {e}")));
        }
        let mut dev = Device {
            ctx,
            pd,
            name: name.to_string(),
            mtu: 0,
        };
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: `attr` is a zeroed ibv_port_attr as large as any layout the
        // library writes (the compat entry point writes the older, shorter one).
        let rc = unsafe {
            ffi::ibv_query_port(dev.ctx, PORT, (&mut attr as *mut ffi::ibv_port_attr).cast())
        };
        if rc != 0 {
            return Err(RdmaError::NoDevice(format!(
                "{name}: ibv_query_port: {}",
                io::Error::from_raw_os_error(rc)
            )));
        }
        if attr.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(RdmaError::PortDown {
                device: name.to_string(),
                state: attr.state,
            });
        }
        dev.mtu = attr.active_mtu;
        Ok(Arc::new(dev))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every child (MR, CQ, QP) holds an Arc of this device, so none
        // is left; each object is freed once.
        unsafe {
            ffi::ibv_dealloc_pd(self.pd);
            ffi::ibv_close_device(self.ctx);
        }
    }
}

/// A registered memory region.
pub struct Region {
    mr: *mut ffi::ibv_mr,
    _dev: Arc<Device>,
    /// Memory the region owns (the receive ring, the staging buffer); `None`
    /// for a registration of a buffer someone else keeps alive.
    owned: Option<Owned>,
    addr: u64,
    len: usize,
}

// SAFETY: the MR is only read (keys) or deregistered in Drop; the owned bytes
// are accessed through the explicit raw-pointer methods below, whose callers
// follow the ring protocol (one writer per byte range at a time).
unsafe impl Send for Region {}
// SAFETY: as for Send.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates `len` zeroed bytes and registers them (`remote`: the peer may
    /// RDMA WRITE into them).
    pub fn alloc(dev: &Arc<Device>, len: usize, remote: bool) -> Result<Region, RdmaError> {
        let mut bytes = vec![0u8; len.max(1)].into_boxed_slice();
        let p = bytes.as_mut_ptr();
        // SAFETY: `bytes` lives in the region (moved, not reallocated: a boxed
        // slice's heap block never moves) until after ibv_dereg_mr in Drop.
        let mut r = unsafe { Self::register_raw(dev, p, len.max(1), remote)? };
        r.owned = Some(Owned::Heap(bytes));
        Ok(r)
    }

    /// Allocates a receive ring of `len` bytes (rounded up to whole pages)
    /// mapped twice, back to back: the byte after its last is its first
    /// again, so any `len` bytes from any position read as one slice
    /// ([`Region::span`]), wrapped or not. Only the first mapping is
    /// registered (the peer writes there; a write that wraps is two writes).
    pub fn alloc_mirrored(dev: &Arc<Device>, len: usize) -> Result<Region, RdmaError> {
        let mirror = Mirror::new(len).map_err(|e| RdmaError::Registration {
            bytes: len,
            reason: format!("mapping the receive ring twice: {e}"),
        })?;
        // SAFETY: the mapping lives in the region (`owned`), unmapped only
        // after ibv_dereg_mr in Drop.
        let mut r = unsafe { Self::register_raw(dev, mirror.base, mirror.len, true)? };
        r.owned = Some(Owned::Mirrored(mirror));
        Ok(r)
    }

    /// Registers memory owned elsewhere (pinned).
    ///
    /// # Safety
    /// `[p, p+len)` must stay allocated while work requests read it through
    /// the region (see `stable`: the buffer pool's allocations and lent
    /// buffers), and the region must not be used once it was freed.
    pub unsafe fn register_raw(
        dev: &Arc<Device>,
        p: *mut u8,
        len: usize,
        remote: bool,
    ) -> Result<Region, RdmaError> {
        let mut access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        if remote {
            access |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        }
        // SAFETY: the caller keeps the range alive; the PD is live (Arc).
        let mr = unsafe { ffi::ibv_reg_mr(dev.pd, p.cast(), len, access.0 as i32) };
        if mr.is_null() {
            return Err(RdmaError::Registration {
                bytes: len,
                reason: io::Error::last_os_error().to_string(),
            });
        }
        Ok(Region {
            mr,
            _dev: dev.clone(),
            owned: None,
            addr: p as u64,
            len,
        })
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is a live registration until Drop.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as in `lkey`.
        unsafe { (*self.mr).rkey }
    }

    /// Copies `src` into the owned bytes at `at`.
    ///
    /// # Safety
    /// Nobody else (local thread or device) reads or writes `[at, at+len)` now.
    pub unsafe fn write_at(&self, at: usize, src: &[u8]) {
        let Some((p, len)) = self.owned.as_ref().map(Owned::bytes) else {
            return;
        };
        assert!(at + src.len() <= len, "region write out of bounds");
        // SAFETY: in bounds (checked); exclusive by the caller's contract.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p.add(at), src.len()) };
    }

    /// Copies owned bytes at `at` into `dst`.
    ///
    /// # Safety
    /// The device has finished writing `[at, at+dst.len())` (its completion
    /// was polled) and does not write it again until the range is given back.
    pub unsafe fn read_at(&self, at: usize, dst: &mut [u8]) {
        let Some((p, len)) = self.owned.as_ref().map(Owned::bytes) else {
            return;
        };
        assert!(at + dst.len() <= len, "region read out of bounds");
        // SAFETY: in bounds (checked); the device is done with it (contract).
        unsafe { ptr::copy_nonoverlapping(p.add(at), dst.as_mut_ptr(), dst.len()) };
    }

    /// Where `len` bytes of a mirrored ring from position `at` lie, as one
    /// run of memory (through the second mapping when they wrap). `None` for
    /// a region that is not a mirrored ring, or a span longer than it.
    /// Reading or writing through the pointer is the caller's claim (the
    /// ring protocol: the device is done with those bytes).
    pub fn span(&self, at: usize, len: usize) -> Option<*mut u8> {
        match &self.owned {
            Some(Owned::Mirrored(m)) if at < m.len && len <= m.len => {
                // SAFETY: `at + len < 2 * m.len`: inside the double mapping.
                Some(unsafe { m.base.add(at) })
            }
            _ => None,
        }
    }
}

/// Memory a [`Region`] owns.
enum Owned {
    Heap(Box<[u8]>),
    Mirrored(Mirror),
}

impl Owned {
    /// Its start and length (a mirrored ring's first mapping).
    fn bytes(&self) -> (*mut u8, usize) {
        match self {
            Owned::Heap(b) => (b.as_ptr().cast_mut(), b.len()),
            Owned::Mirrored(m) => (m.base, m.len),
        }
    }
}

/// `len` bytes of a memfd mapped twice at `base` and `base + len`.
struct Mirror {
    base: *mut u8,
    len: usize,
}

impl Mirror {
    fn new(len: usize) -> io::Result<Mirror> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let len = len.max(1).div_ceil(page) * page;
        // SAFETY: a static NUL-terminated name; the fd is closed below.
        let fd = unsafe { libc::memfd_create(c"causeway-rdma-ring".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mapped = Self::map(fd, len);
        // SAFETY: our fd; the mappings keep the memory (the fd is not needed).
        unsafe { libc::close(fd) };
        mapped
    }

    fn map(fd: libc::c_int, len: usize) -> io::Result<Mirror> {
        // SAFETY: fd is an open memfd of ours.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Reserve 2·len of address space, then map the file over both halves.
        // SAFETY: a fresh anonymous reservation, nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                2 * len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let m = Mirror {
            base: base.cast(),
            len,
        };
        for half in 0..2 {
            // SAFETY: MAP_FIXED inside our own reservation (Drop unmaps all of it).
            let p = unsafe {
                libc::mmap(
                    base.cast::<u8>().add(half * len).cast(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(m)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        // SAFETY: our reservation of 2·len bytes; nothing refers to it any more
        // (the region deregistered it first).
        unsafe { libc::munmap(self.base.cast(), 2 * self.len) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: deregistered once, before the owned bytes (dropped after this
        // body) and before the device (the Arc field).
        unsafe { ffi::ibv_dereg_mr(self.mr) };
    }
}

/// One work completion, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub wr_id: u64,
    pub opcode: u32,
    /// `(status, vendor error)` when the work request failed.
    pub error: Option<(u32, u32)>,
    /// The immediate value, host order.
    pub imm: Option<u32>,
}

/// Gather entries one RDMA WRITE may read from (a frame's header and its
/// payload, say, in one write).
pub const MAX_SGE: usize = 4;

/// Local bytes a send reads: address, length and the key of their registration.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// A completion channel, its CQ and one RC queue pair.
pub struct Endpoint {
    dev: Arc<Device>,
    chan: *mut ffi::ibv_comp_channel,
    cq: *mut ffi::ibv_cq,
    qp: *mut ffi::ibv_qp,
}

// SAFETY: posting, polling and modifying a QP/CQ are thread-safe verbs
// (providers lock their queues); the pointers are freed only in Drop, after
// every thread using the endpoint has its last reference dropped (Arc).
unsafe impl Send for Endpoint {}
// SAFETY: as for Send.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Creates the channel, a CQ of `2 * depth` entries and an RC QP with
    /// `depth` send and receive entries, and moves the QP to INIT.
    pub fn new(dev: &Arc<Device>, depth: u32) -> Result<Endpoint, RdmaError> {
        let fail = |what: &str| RdmaError::Setup(format!("{}: {}", dev.name, last_os(what)));
        // SAFETY: the context is live (Arc); freed in Drop.
        let chan = unsafe { ffi::ibv_create_comp_channel(dev.ctx) };
        if chan.is_null() {
            return Err(fail("ibv_create_comp_channel"));
        }
        let mut ep = Endpoint {
            dev: dev.clone(),
            chan,
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
        };
        // SAFETY: channel and context are live; the CQ is freed in Drop.
        ep.cq = unsafe {
            ffi::ibv_create_cq(dev.ctx, (2 * depth + 16) as i32, ptr::null_mut(), chan, 0)
        };
        if ep.cq.is_null() {
            return Err(fail("ibv_create_cq"));
        }
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: ep.cq,
            recv_cq: ep.cq,
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: MAX_SGE as u32,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: PD and CQ are live; `init` is fully initialised.
        ep.qp = unsafe { ffi::ibv_create_qp(dev.pd, &mut init) };
        if ep.qp.is_null() {
            return Err(fail("ibv_create_qp"));
        }
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: PORT,
            qp_access_flags: ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as M;
        ep.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;
        Ok(ep)
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is live until Drop.
        unsafe { (*self.qp).qp_num }
    }

    fn modify(
        &self,
        a: &mut ffi::ibv_qp_attr,
        mask: ffi::ibv_qp_attr_mask,
        to: &str,
    ) -> Result<(), RdmaError> {
        // SAFETY: the QP is live; `a` is initialised for every bit of `mask`.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, a, mask.0 as i32) };
        if rc != 0 {
            return Err(RdmaError::Setup(format!(
                "{}: QP {} to {to}: {}",
                self.dev.name,
                self.qpn(),
                io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }

    /// Moves the QP to RTR then RTS towards `remote` (`local`: our own info,
    /// for the GID index and the PSN).
    pub fn connect(&self, local: &ConnInfo, remote: &ConnInfo) -> Result<(), RdmaError> {
        use ffi::ibv_qp_attr_mask as M;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: self.dev.mtu.min(remote.mtu),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = PORT;
        a.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
        a.ah_attr.grh.sgid_index = local.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: local.psn,
            // Local ACK timeout 4.096 µs × 2^15 ≈ 134 ms: how long a lost
            // packet (or its ACK) stalls the QP before the retransmission.
            // At 17 (0.54 s) nine of them in a row on a starved Soft-RoCE
            // guest were a 5 s stall with nothing lost on the wire but the
            // nine packets rxe itself dropped (`rdma statistic`:
            // completer_retry_err 9, sent − peer's rcvd = 9). Below ~14 a
            // slow-but-alive TCG guest retransmits spuriously. A dead peer
            // is found by the TCP control connection, not by retries (rxe
            // treats retry_cnt 7 as "retry forever").
            timeout: 15,
            retry_cnt: 7,
            // 7: retry forever while the receiver has no receive posted.
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Moves the QP to the error state: outstanding work requests complete
    /// with a flush error, new ones fail.
    pub fn break_off(&self) {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
            ..Default::default()
        };
        let _ = self.modify(&mut a, ffi::ibv_qp_attr_mask::IBV_QP_STATE, "ERR");
    }

    fn ops(&self) -> &ffi::ibv_context_ops {
        // SAFETY: the context is live (Arc) and its ops table never changes.
        unsafe { &(*self.dev.ctx).ops }
    }

    /// Posts a receive without buffers (for WRITE WITH IMM and zero-byte SENDs).
    pub fn post_recv(&self, wr_id: u64) -> Result<(), RdmaError> {
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = ptr::null_mut();
        let post = self.ops().post_recv.ok_or_else(|| no_op("post_recv"))?;
        // SAFETY: the QP is live; `wr` has no scatter entries.
        let rc = unsafe { post(self.qp, &mut wr, &mut bad) };
        posted(rc, "post_recv")
    }

    /// RDMA WRITE WITH IMM of the `local` bytes (gathered in order, at most
    /// [`MAX_SGE`] entries) to `remote_addr`/`rkey`; signalled.
    ///
    /// # Safety
    /// The local bytes must stay valid and unchanged until this work
    /// request's completion is polled.
    pub unsafe fn post_write_imm(
        &self,
        wr_id: u64,
        local: &[Local],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), RdmaError> {
        let empty = ffi::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        debug_assert!(local.len() <= MAX_SGE, "{} gather entries", local.len());
        let mut sges = [empty; MAX_SGE];
        let n = local.len().min(MAX_SGE);
        for (sge, l) in sges.iter_mut().zip(&local[..n]) {
            *sge = ffi::ibv_sge {
                addr: l.addr,
                length: l.len,
                lkey: l.lkey,
            };
        }
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: sges.as_mut_ptr(),
            num_sge: n as i32,
            opcode: ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        self.post_send(&mut wr)
    }

    /// A zero-byte SEND WITH IMM (credits, end of stream); signalled.
    pub fn post_send_imm(&self, wr_id: u64, imm: u32) -> Result<(), RdmaError> {
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: ptr::null_mut(),
            num_sge: 0,
            opcode: ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        self.post_send(&mut wr)
    }

    fn post_send(&self, wr: &mut ffi::ibv_send_wr) -> Result<(), RdmaError> {
        let mut bad = ptr::null_mut();
        let post = self.ops().post_send.ok_or_else(|| no_op("post_send"))?;
        // SAFETY: the QP is live; `wr` and its scatter list outlive the call
        // (the provider copies them into its queue).
        let rc = unsafe { post(self.qp, wr, &mut bad) };
        posted(rc, "post_send")
    }

    /// Polls up to `out.len()` completions.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize, RdmaError> {
        let mut wc: [MaybeUninit<ffi::ibv_wc>; 16] = [MaybeUninit::uninit(); 16];
        let poll = self.ops().poll_cq.ok_or_else(|| no_op("poll_cq"))?;
        // SAFETY: the CQ is live; the provider writes at most `n` entries.
        let n = unsafe { poll(self.cq, max.min(16) as i32, wc.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(RdmaError::Setup(format!(
                "{}: ibv_poll_cq failed",
                self.dev.name
            )));
        }
        for w in &wc[..n as usize] {
            // SAFETY: the provider initialised the first `n` entries.
            let w = unsafe { w.assume_init_ref() };
            out.push(Completion {
                wr_id: w.wr_id(),
                opcode: w.opcode(),
                error: w.error(),
                imm: w.imm_data().map(u32::from_be),
            });
        }
        Ok(n as usize)
    }

    /// Asks for an event on the next completion.
    pub fn arm(&self) -> Result<(), RdmaError> {
        let arm = self
            .ops()
            .req_notify_cq
            .ok_or_else(|| no_op("req_notify_cq"))?;
        // SAFETY: the CQ is live.
        let rc = unsafe { arm(self.cq, 0) };
        posted(rc, "req_notify_cq")
    }

    /// Sleeps on the completion channel for at most `timeout`; true when an
    /// event came (it is consumed and acknowledged: re-arm before sleeping again).
    pub fn wait(&self, timeout: Duration) -> bool {
        // SAFETY: the channel is live; reading its fd field.
        let fd = unsafe { (*self.chan).fd };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
        if rc <= 0 {
            return false;
        }
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: the fd is readable, so this does not block; it returns our CQ.
        let rc = unsafe { ffi::ibv_get_cq_event(self.chan, &mut cq, &mut ctx) };
        if rc == 0 {
            // SAFETY: acknowledging the one event just taken from our CQ.
            unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        }
        true
    }
}

fn no_op(what: &str) -> RdmaError {
    RdmaError::Setup(format!("the provider has no {what}"))
}

fn posted(rc: i32, what: &str) -> Result<(), RdmaError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(RdmaError::Post {
            verb: what.to_string(),
            reason: io::Error::from_raw_os_error(rc).to_string(),
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: children before parents, each once; every CQ event taken was
        // acknowledged in `wait`, so ibv_destroy_cq does not block.
        unsafe {
            if !self.qp.is_null() {
                ffi::ibv_destroy_qp(self.qp);
            }
            if !self.cq.is_null() {
                ffi::ibv_destroy_cq(self.cq);
            }
            ffi::ibv_destroy_comp_channel(self.chan);
        }
    }
}
