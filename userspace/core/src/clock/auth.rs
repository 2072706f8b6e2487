//! Authenticated clock probes (pure: no sockets, no clock reads).
//!
//! The tag in the probe's auth field is HMAC-SHA256 truncated to 16 bytes
//! (the leftmost, as RFC 4868's HMAC-SHA-256-128), keyed with the 32-byte
//! key the two agents share for their pair, over the whole 136-byte probe
//! with the bytes the kernel may write in flight zeroed
//! ([`covered_bytes`], rule in `bpf_maps::clock`) and the auth field zeroed.
//! `FLAG_AUTH` says a tag is present; the flags word is covered, so the flag
//! cannot be stripped from a tagged probe without breaking the tag.
//!
//! Replays: a probe whose tag is good is then checked against a window of
//! the last [`REPLAY_WINDOW`] sequence numbers seen from that peer for that
//! kind and nonce (a probe of the same kind, nonce and sequence that was
//! already seen, or one older than the window, is a replay). The windows
//! of the last [`NONCES_KEPT`] nonces per peer are kept, so a peer's
//! restart (a new nonce) starts a new window while replays of its previous
//! sessions are still recognised.
//!
//! [`PeerGuard`] is the per-peer state the probe session keeps: the key,
//! the windows and what it refused.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use bpf_maps::clock::{
    stamp_offset, FLAG_AUTH, FLAG_KERNEL_T1, PROBE_AUTH_LEN, PROBE_KIND_REQUEST,
    PROBE_KIND_RESPONSE, PROBE_LEN, PROBE_OFF_AUTH, PROBE_OFF_FLAGS, PROBE_OFF_KIND,
    PROBE_OFF_NONCE, PROBE_OFF_SEQ, STAMP_SET_KERNEL,
};

/// Length of a probe key, bytes.
pub const KEY_LEN: usize = 32;
/// Sequence numbers remembered per (kind, nonce).
pub const REPLAY_WINDOW: u32 = 64;
/// Nonces (peer sessions) remembered per peer and kind.
pub const NONCES_KEPT: usize = 8;

/// A per-peer probe key. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ProbeKey([u8; KEY_LEN]);

impl std::fmt::Debug for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeKey(<redacted>)")
    }
}

/// Why text is not a probe key (the text itself is never quoted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a probe key is {expected} hex digits (32 bytes), found {found} characters")]
    Length { expected: usize, found: usize },
    #[error("a probe key is hex digits only (character {0} is not)")]
    NotHex(usize),
    #[error("a probe key must not be all zero")]
    Zero,
}

impl ProbeKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        ProbeKey(bytes)
    }

    /// 64 hex digits; surrounding whitespace (a trailing newline) is ignored.
    pub fn parse_hex(text: &str) -> Result<Self, KeyError> {
        let t = text.trim();
        if t.len() != 2 * KEY_LEN || !t.is_ascii() {
            return Err(KeyError::Length {
                expected: 2 * KEY_LEN,
                found: t.chars().count(),
            });
        }
        let digit = |i: usize| {
            char::from(t.as_bytes()[i])
                .to_digit(16)
                .map(|d| d as u8)
                .ok_or(KeyError::NotHex(i + 1))
        };
        let mut key = [0u8; KEY_LEN];
        for (i, b) in key.iter_mut().enumerate() {
            *b = (digit(2 * i)? << 4) | digit(2 * i + 1)?;
        }
        if key.iter().all(|&b| b == 0) {
            return Err(KeyError::Zero);
        }
        Ok(ProbeKey(key))
    }
}

/// Kernel stamp slots the eBPF programs may write into a probe of `kind`
/// (wire value): egress and ingress of a request (t1, t2) or a response
/// (t3, t4); none for a follow-up.
fn kernel_written_slots(kind: u8) -> &'static [usize] {
    match kind {
        PROBE_KIND_REQUEST => &[0, 1],
        PROBE_KIND_RESPONSE => &[2, 3],
        _ => &[],
    }
}

/// The bytes the tag covers: the probe with the kernel-written stamp slots
/// of its kind, their `FLAG_KERNEL_T*` bits and the auth field zeroed.
pub fn covered_bytes(probe: &[u8; PROBE_LEN]) -> [u8; PROBE_LEN] {
    let mut b = *probe;
    let mut flags = u16::from_be_bytes([b[PROBE_OFF_FLAGS], b[PROBE_OFF_FLAGS + 1]]);
    for &slot in kernel_written_slots(b[PROBE_OFF_KIND]) {
        let o = stamp_offset(STAMP_SET_KERNEL, slot);
        b[o..o + 8].fill(0);
        flags &= !(FLAG_KERNEL_T1 << slot);
    }
    b[PROBE_OFF_FLAGS..PROBE_OFF_FLAGS + 2].copy_from_slice(&flags.to_be_bytes());
    b[PROBE_OFF_AUTH..PROBE_OFF_AUTH + PROBE_AUTH_LEN].fill(0);
    b
}

fn mac(key: &ProbeKey, probe: &[u8; PROBE_LEN]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: this cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key.0)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(&covered_bytes(probe));
    m
}

/// Sets `FLAG_AUTH` and writes the tag into the auth field.
pub fn seal(key: &ProbeKey, probe: &mut [u8; PROBE_LEN]) {
    let flags =
        u16::from_be_bytes([probe[PROBE_OFF_FLAGS], probe[PROBE_OFF_FLAGS + 1]]) | FLAG_AUTH;
    probe[PROBE_OFF_FLAGS..PROBE_OFF_FLAGS + 2].copy_from_slice(&flags.to_be_bytes());
    let tag = mac(key, probe).finalize().into_bytes();
    probe[PROBE_OFF_AUTH..PROBE_OFF_AUTH + PROBE_AUTH_LEN].copy_from_slice(&tag[..PROBE_AUTH_LEN]);
}

/// Why a probe from a peer with a key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthReject {
    #[error("the probe carries no tag but the peer has a key")]
    Unauthenticated,
    #[error("the probe's tag is wrong")]
    Forged,
    #[error("the probe was already seen or is older than the replay window")]
    Replayed,
}

/// Checks the tag of `probe` (constant time); it must carry `FLAG_AUTH`.
pub fn verify(key: &ProbeKey, probe: &[u8; PROBE_LEN]) -> Result<(), AuthReject> {
    let flags = u16::from_be_bytes([probe[PROBE_OFF_FLAGS], probe[PROBE_OFF_FLAGS + 1]]);
    if flags & FLAG_AUTH == 0 {
        return Err(AuthReject::Unauthenticated);
    }
    mac(key, probe)
        .verify_truncated_left(&probe[PROBE_OFF_AUTH..PROBE_OFF_AUTH + PROBE_AUTH_LEN])
        .map_err(|_| AuthReject::Forged)
}

/// Sequence numbers seen: the highest, and a bit per earlier one
/// (bit `d` = `highest − d`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    highest: Option<u32>,
    seen: u64,
}

impl ReplayWindow {
    /// Records `seq`; `false` if it was seen or is older than the window.
    pub fn accept(&mut self, seq: u32) -> bool {
        let Some(h) = self.highest else {
            self.highest = Some(seq);
            self.seen = 1;
            return true;
        };
        if seq > h {
            let shift = seq - h;
            self.seen = if shift >= 64 {
                1
            } else {
                (self.seen << shift) | 1
            };
            self.highest = Some(seq);
            return true;
        }
        let d = h - seq;
        if d >= REPLAY_WINDOW || self.seen & (1 << d) != 0 {
            return false;
        }
        self.seen |= 1 << d;
        true
    }
}

/// What a [`PeerGuard`] refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuthCounters {
    pub unauthenticated: u64,
    pub forged: u64,
    pub replayed: u64,
}

/// One peer's key (if any) and replay windows.
#[derive(Clone, Debug)]
pub struct PeerGuard {
    key: Option<ProbeKey>,
    /// (kind, nonce, window), most recently used last.
    windows: Vec<(u8, u64, ReplayWindow)>,
    pub counters: AuthCounters,
}

impl PeerGuard {
    pub fn new(key: Option<ProbeKey>) -> Self {
        PeerGuard {
            key,
            windows: Vec::new(),
            counters: AuthCounters::default(),
        }
    }

    pub fn requires_auth(&self) -> bool {
        self.key.is_some()
    }

    /// Tags an outgoing probe when the peer has a key.
    pub fn seal(&self, probe: &mut [u8; PROBE_LEN]) {
        if let Some(k) = &self.key {
            seal(k, probe);
        }
    }

    /// Admits a decoded probe from this peer: without a key everything
    /// passes (a tag, if any, is not checked); with one the tag must be
    /// good and the sequence new. Refusals are counted.
    pub fn admit(&mut self, probe: &[u8; PROBE_LEN]) -> Result<(), AuthReject> {
        let Some(key) = &self.key else {
            return Ok(());
        };
        let r = verify(key, probe).and_then(|()| self.check_replay(probe));
        match r {
            Err(AuthReject::Unauthenticated) => self.counters.unauthenticated += 1,
            Err(AuthReject::Forged) => self.counters.forged += 1,
            Err(AuthReject::Replayed) => self.counters.replayed += 1,
            Ok(()) => {}
        }
        r
    }

    fn check_replay(&mut self, probe: &[u8; PROBE_LEN]) -> Result<(), AuthReject> {
        let kind = probe[PROBE_OFF_KIND];
        let mut n = [0u8; 8];
        n.copy_from_slice(&probe[PROBE_OFF_NONCE..PROBE_OFF_NONCE + 8]);
        let nonce = u64::from_be_bytes(n);
        let mut s = [0u8; 4];
        s.copy_from_slice(&probe[PROBE_OFF_SEQ..PROBE_OFF_SEQ + 4]);
        let seq = u32::from_be_bytes(s);
        let i = match self
            .windows
            .iter()
            .position(|&(k, n, _)| k == kind && n == nonce)
        {
            Some(i) => i,
            None => {
                let same_kind = self.windows.iter().filter(|w| w.0 == kind).count();
                if same_kind >= NONCES_KEPT {
                    if let Some(oldest) = self.windows.iter().position(|w| w.0 == kind) {
                        self.windows.remove(oldest);
                    }
                }
                self.windows.push((kind, nonce, ReplayWindow::default()));
                self.windows.len() - 1
            }
        };
        let mut entry = self.windows.remove(i);
        let fresh = entry.2.accept(seq);
        self.windows.push(entry);
        if fresh {
            Ok(())
        } else {
            Err(AuthReject::Replayed)
        }
    }
}
