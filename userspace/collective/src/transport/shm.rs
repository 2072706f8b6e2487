//! Shared-memory transport between ranks on one host: a single-producer,
//! single-consumer byte ring in a file under /dev/shm, mapped by both processes.
//! Waiting spins briefly, then sleeps on a futex in the shared page.
//!
//! Layout of the mapping (offsets in bytes):
//! `0` head u64 (bytes written, writer-owned) · `8` data_seq u32 · `12` reader_waiting u32 ·
//! `64` tail u64 (bytes read, reader-owned) · `72` space_seq u32 · `76` writer_waiting u32 ·
//! `80` closed u32 · `128..` data (capacity bytes).
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memmap2::MmapMut;

use super::{Closer, Reader, Transport, Writer};

const HEADER: usize = 128;
const HEAD: usize = 0;
const DATA_SEQ: usize = 8;
const READER_WAITING: usize = 12;
const TAIL: usize = 64;
const SPACE_SEQ: usize = 72;
const WRITER_WAITING: usize = 76;
const CLOSED: usize = 80;
/// Polls before sleeping on the futex (the first 100 busy, the rest yielding): short,
/// because on an oversubscribed host spinning steals the CPU the peer needs.
const SPINS: u32 = 200;

/// One direction of a shared-memory channel.
pub struct ShmRing {
    _map: MmapMut,
    base: *mut u8,
    cap: usize,
    path: PathBuf,
    owner: bool,
}

// SAFETY: `base` points into `_map`, which lives as long as the ring and is never
// remapped. All shared words are accessed through atomics; the data area is
// written only by the single writer in [tail+cap-free, head) and read only by the
// single reader in [tail, head), with the atomics ordering the hand-over.
unsafe impl Send for ShmRing {}
// SAFETY: see `Send`; `&self` methods touch shared memory only through atomics
// or in the disjoint regions described there.
unsafe impl Sync for ShmRing {}

impl ShmRing {
    /// Creates a new ring file (`create_new`: never reuses a stale one) and maps it.
    pub fn create(path: &Path, cap: usize) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        f.set_len((HEADER + cap) as u64)?;
        Self::map(f, path, cap, true)
    }

    /// Maps a ring another process created, then unlinks its file: from here on
    /// only the two mappings keep it alive.
    pub fn open(path: &Path) -> io::Result<Self> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        let len = f.metadata()?.len() as usize;
        if len <= HEADER || len > HEADER + (1 << 30) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} has bad size {len}", path.display()),
            ));
        }
        let ring = Self::map(f, path, len - HEADER, false)?;
        let _ = std::fs::remove_file(path);
        Ok(ring)
    }

    fn map(f: File, path: &Path, cap: usize, owner: bool) -> io::Result<Self> {
        // SAFETY: the file is private to the two ranks of this pair (a fresh name with
        // the session id and pid, created with create_new); its size is fixed above
        // and nobody truncates it while mapped.
        let mut map = unsafe { MmapMut::map_mut(&f)? };
        let base = map.as_mut_ptr();
        Ok(ShmRing {
            _map: map,
            base,
            cap,
            path: path.to_path_buf(),
            owner,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is one of the 8-aligned header offsets inside the mapping
        // (page-aligned base); the word is only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `u64_at`, for the 4-aligned u32 header words.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    fn closed(&self) -> bool {
        self.u32_at(CLOSED).load(Ordering::Acquire) != 0
    }

    pub fn close(&self) {
        self.u32_at(CLOSED).store(1, Ordering::Release);
        for seq in [DATA_SEQ, SPACE_SEQ] {
            self.u32_at(seq).fetch_add(1, Ordering::SeqCst);
            futex_wake(self.u32_at(seq));
        }
    }

    /// Waits until `ready()` holds or the ring is closed. `seq`/`waiting` are the
    /// futex word and the waiter flag of the condition.
    fn wait(&self, seq: usize, waiting: usize, ready: impl Fn() -> bool) -> bool {
        for i in 0..SPINS {
            if ready() {
                return true;
            }
            if self.closed() {
                return false;
            }
            if i > 100 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        loop {
            let s = self.u32_at(seq).load(Ordering::SeqCst);
            self.u32_at(waiting).store(1, Ordering::SeqCst);
            if ready() || self.closed() {
                self.u32_at(waiting).store(0, Ordering::SeqCst);
                return ready();
            }
            futex_wait(self.u32_at(seq), s, Duration::from_millis(100));
            self.u32_at(waiting).store(0, Ordering::SeqCst);
        }
    }

    fn signal(&self, seq: usize, waiting: usize) {
        self.u32_at(seq).fetch_add(1, Ordering::SeqCst);
        if self.u32_at(waiting).load(Ordering::SeqCst) != 0 {
            futex_wake(self.u32_at(seq));
        }
    }

    /// Writes some of `buf`, blocking while the ring is full.
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let head = self.u64_at(HEAD).load(Ordering::Relaxed);
        let full = || head - self.u64_at(TAIL).load(Ordering::Acquire) >= self.cap as u64;
        if full() && !self.wait(SPACE_SEQ, WRITER_WAITING, || !full()) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "shared-memory ring closed",
            ));
        }
        if self.closed() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "shared-memory ring closed",
            ));
        }
        let tail = self.u64_at(TAIL).load(Ordering::Acquire);
        let free = self.cap - (head - tail) as usize;
        let n = free.min(buf.len());
        let at = (head % self.cap as u64) as usize;
        let first = n.min(self.cap - at);
        // SAFETY: [at, at+first) and [0, n-first) lie inside the data area and inside
        // the free region [head, tail+cap), which the reader does not touch until
        // `head` is published below; `buf` is a separate, live slice.
        unsafe {
            let data = self.base.add(HEADER);
            std::ptr::copy_nonoverlapping(buf.as_ptr(), data.add(at), first);
            std::ptr::copy_nonoverlapping(buf.as_ptr().add(first), data, n - first);
        }
        self.u64_at(HEAD).store(head + n as u64, Ordering::Release);
        self.signal(DATA_SEQ, READER_WAITING);
        Ok(n)
    }

    /// Reads some bytes into `buf`, blocking while the ring is empty; 0 = closed and drained.
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let tail = self.u64_at(TAIL).load(Ordering::Relaxed);
        let empty = || self.u64_at(HEAD).load(Ordering::Acquire) == tail;
        if empty() && !self.wait(DATA_SEQ, READER_WAITING, || !empty()) {
            return Ok(0);
        }
        let head = self.u64_at(HEAD).load(Ordering::Acquire);
        let n = ((head - tail) as usize).min(buf.len());
        let at = (tail % self.cap as u64) as usize;
        let first = n.min(self.cap - at);
        // SAFETY: [tail, tail+n) was published by the writer's Release store of `head`
        // (paired with the Acquire load above) and is not rewritten until `tail`
        // moves past it below; both copies stay inside the data area.
        unsafe {
            let data = self.base.add(HEADER);
            std::ptr::copy_nonoverlapping(data.add(at), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), n - first);
        }
        self.u64_at(TAIL).store(tail + n as u64, Ordering::Release);
        self.signal(SPACE_SEQ, WRITER_WAITING);
        Ok(n)
    }
}

impl Drop for ShmRing {
    fn drop(&mut self) {
        if self.owner {
            // The peer unlinks after mapping; this covers a peer that never came.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 in a shared mapping (not
    // FUTEX_PRIVATE: the other process waits/wakes on the same word); the kernel
    // only reads `word` and `ts`, which outlive the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it is valid and aligned.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// A duplex channel made of two rings.
pub struct ShmTransport {
    tx: Arc<ShmRing>,
    rx: Arc<ShmRing>,
}

impl ShmTransport {
    pub fn new(tx: ShmRing, rx: ShmRing) -> Self {
        ShmTransport {
            tx: Arc::new(tx),
            rx: Arc::new(rx),
        }
    }
}

struct RingReader(Arc<ShmRing>);
impl crate::transport::StreamRead for RingReader {}
impl Read for RingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_some(buf)
    }
}

struct RingWriter(Arc<ShmRing>);
impl Write for RingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_some(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct ShmCloser(Arc<ShmRing>, Arc<ShmRing>);
impl Closer for ShmCloser {
    fn close(&self) {
        self.0.close();
        self.1.close();
    }
    fn finish(&self) {
        // Only our sending ring: the peer drains it, then reads end-of-stream.
        self.0.close();
    }
}

impl Transport for ShmTransport {
    fn describe(&self) -> String {
        format!("shm {}", self.tx.path().display())
    }

    fn split(self: Box<Self>) -> io::Result<(Reader, Writer, Arc<dyn Closer>)> {
        let closer = Arc::new(ShmCloser(self.tx.clone(), self.rx.clone()));
        Ok((
            Box::new(RingReader(self.rx)),
            Box::new(RingWriter(self.tx)),
            closer,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(tag: &str) -> PathBuf {
        PathBuf::from(format!(
            "/dev/shm/causeway-test-{}-{tag}",
            std::process::id()
        ))
    }

    #[test]
    fn streams_more_than_the_capacity_in_order_across_threads() {
        let p = path("stream");
        let w = ShmRing::create(&p, 1000).expect("create");
        let r = ShmRing::open(&p).expect("open");
        assert!(!p.exists(), "opener unlinks the file");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let expect = data.clone();
        let t = std::thread::spawn(move || {
            let mut w = RingWriter(Arc::new(w));
            for c in data.chunks(777) {
                w.write_all(c).expect("write");
            }
        });
        let mut got = vec![0u8; expect.len()];
        RingReader(Arc::new(r)).read_exact(&mut got).expect("read");
        t.join().expect("writer");
        assert_eq!(got, expect);
    }

    #[test]
    fn close_wakes_a_blocked_reader_and_fails_writes() {
        let p = path("close");
        let w = Arc::new(ShmRing::create(&p, 64).expect("create"));
        let r = Arc::new(ShmRing::open(&p).expect("open"));
        let r2 = r.clone();
        let t = std::thread::spawn(move || RingReader(r2).read(&mut [0u8; 8]));
        std::thread::sleep(Duration::from_millis(50));
        r.close();
        assert_eq!(t.join().expect("reader").expect("eof"), 0);
        assert!(RingWriter(w).write(b"x").is_err());
    }

    #[test]
    fn rejects_a_file_of_the_wrong_size() {
        let p = path("bad");
        std::fs::write(&p, b"short").expect("write");
        assert!(ShmRing::open(&p).is_err());
        let _ = std::fs::remove_file(&p);
    }
}
