//! Kernel TLS (kTLS): once rustls has finished the handshake, the kernel's
//! `tls` upper layer protocol encrypts and decrypts a connection's records,
//! so a data link's bytes go from the engine's buffers to the socket with
//! one copy, as in plaintext, and no userspace record layer.
//!
//! [`attach`] sets `TCP_ULP "tls"` (failing with `ENOENT` when the kernel has
//! no `tls` module); [`install`] then hands rustls' traffic secrets and
//! sequence numbers to `SOL_TLS` `TLS_TX` / `TLS_RX`. Afterwards a plain
//! `write` sends application-data records, and [`KtlsReader`] receives with
//! `recvmsg`, reading each record's type from its `TLS_GET_RECORD_TYPE`
//! control message: application data is returned, a `close_notify` alert is
//! the end of the stream, any other alert or a handshake record (a key
//! update or session ticket, which this side cannot process) is a typed
//! error naming the peer. [`send_close_notify`] ends our direction cleanly.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use rustls::{ConnectionTrafficSecrets, ExtractedSecrets};

use super::tcp::setsockopt;
use crate::error::TlsError;

const RECORD_ALERT: u8 = 21;
const RECORD_HANDSHAKE: u8 = 22;
const RECORD_DATA: u8 = 23;
const CLOSE_NOTIFY: u8 = 0;

/// Sets the `tls` upper layer protocol on an established connection.
/// `ENOENT`: this kernel has no `tls` module.
pub fn attach(s: &TcpStream) -> io::Result<()> {
    setsockopt(s, libc::SOL_TCP, libc::TCP_ULP, b"tls")
}

/// Whether this kernel has the `tls` upper layer protocol: set on a fresh,
/// unconnected socket it fails with `ENOTCONN` (found, but the socket is
/// not established) rather than `ENOENT` (not found).
pub fn available() -> bool {
    let Ok(s) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None) else {
        return false;
    };
    let s: TcpStream = s.into();
    matches!(attach(&s), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

fn info(version: u16, cipher: u16) -> libc::tls_crypto_info {
    libc::tls_crypto_info {
        version,
        cipher_type: cipher,
    }
}

/// Sets one direction's key, IV and next record sequence number.
fn set_direction(
    s: &TcpStream,
    dir: libc::c_int,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> io::Result<()> {
    let v = libc::TLS_1_3_VERSION;
    let rec_seq = seq.to_be_bytes();
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    // TLS 1.3's 12-byte nonce base: kTLS takes AES-GCM's as a 4-byte salt
    // and an 8-byte IV, ChaCha20-Poly1305's whole.
    let split = |iv: &[u8]| -> io::Result<([u8; 4], [u8; 8])> {
        let salt = iv.get(..4).and_then(|b| b.try_into().ok());
        let rest = iv.get(4..12).and_then(|b| b.try_into().ok());
        salt.zip(rest).ok_or_else(|| bad("IV is not 12 bytes"))
    };
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => {
            let (salt, iv) = split(iv.as_ref())?;
            let c = libc::tls12_crypto_info_aes_gcm_128 {
                info: info(v, libc::TLS_CIPHER_AES_GCM_128),
                iv,
                key: key.as_ref().try_into().map_err(|_| bad("key length"))?,
                salt,
                rec_seq,
            };
            setsockopt(s, libc::SOL_TLS, dir, &c)
        }
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
            let (salt, iv) = split(iv.as_ref())?;
            let c = libc::tls12_crypto_info_aes_gcm_256 {
                info: info(v, libc::TLS_CIPHER_AES_GCM_256),
                iv,
                key: key.as_ref().try_into().map_err(|_| bad("key length"))?,
                salt,
                rec_seq,
            };
            setsockopt(s, libc::SOL_TLS, dir, &c)
        }
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            let c = libc::tls12_crypto_info_chacha20_poly1305 {
                info: info(v, libc::TLS_CIPHER_CHACHA20_POLY1305),
                iv: iv.as_ref().try_into().map_err(|_| bad("IV length"))?,
                key: key.as_ref().try_into().map_err(|_| bad("key length"))?,
                salt: [],
                rec_seq,
            };
            setsockopt(s, libc::SOL_TLS, dir, &c)
        }
        _ => Err(bad("a cipher suite kTLS does not take")),
    }
}

/// Hands both directions to the kernel (after [`attach`]).
pub fn install(s: &TcpStream, secrets: &ExtractedSecrets) -> io::Result<()> {
    set_direction(s, libc::TLS_TX, secrets.tx.0, &secrets.tx.1)?;
    set_direction(s, libc::TLS_RX, secrets.rx.0, &secrets.rx.1)?;
    // TLS 1.3 records from rustls carry no padding: the kernel may then
    // decrypt straight into our buffer (6.0+; older kernels refuse, harmless).
    let _ = setsockopt(s, libc::SOL_TLS, libc::TLS_RX_EXPECT_NO_PAD, &1u32);
    Ok(())
}

/// Sends a `close_notify` alert: the peer reads the end of the stream.
pub fn send_close_notify(s: &TcpStream) -> io::Result<()> {
    let alert = [1u8, CLOSE_NOTIFY]; // warning, close_notify
    let mut cbuf = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: alert.as_ptr() as *mut libc::c_void,
        iov_len: alert.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty message; every pointer set
    // below (iov, control buffer) outlives the sendmsg call, the control
    // buffer is 8-byte aligned and 32 bytes, more than CMSG_SPACE(1), and
    // the kernel only reads the alert bytes through the iovec.
    let rc = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = RECORD_ALERT;
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Ends a kTLS connection: `finish` sends `close_notify` first.
pub struct KtlsCloser(pub(crate) TcpStream);

impl super::Closer for KtlsCloser {
    fn close(&self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
    fn finish(&self) {
        let _ = send_close_notify(&self.0);
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// The receiving half of a kTLS connection.
#[derive(Debug)]
pub struct KtlsReader {
    pub(crate) sock: TcpStream,
    pub(crate) peer: String,
    /// A `close_notify` arrived: only the end of the stream follows.
    pub(crate) closed: bool,
}

/// One `recvmsg`: (bytes, record type if the kernel said).
fn recv_record(s: &TcpStream, buf: &mut [u8]) -> io::Result<(usize, Option<u8>)> {
    let mut cbuf = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty message; the iovec points to
    // `buf` (writable for its length) and the control buffer (8-byte
    // aligned, 32 bytes) to `cbuf`, both alive across the call. The cmsg
    // walk reads only headers the kernel wrote inside `msg_controllen`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(s.as_raw_fd(), &mut msg, 0);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut kind = None;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS && (*c).cmsg_type == libc::TLS_GET_RECORD_TYPE {
                kind = Some(*libc::CMSG_DATA(c));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        Ok((n as usize, kind))
    }
}

impl KtlsReader {
    fn fail(&self, e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

impl crate::transport::StreamRead for KtlsReader {}

impl Read for KtlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.closed || buf.is_empty() {
            return Ok(0);
        }
        let (n, kind) = loop {
            match recv_record(&self.sock, buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A record that fails authentication (tampered ciphertext).
                Err(e) if e.raw_os_error() == Some(libc::EBADMSG) => {
                    return Err(self.fail(TlsError::Record {
                        peer: self.peer.clone(),
                        source: rustls::Error::DecryptError,
                    }))
                }
                r => break r?,
            }
        };
        match kind {
            None | Some(RECORD_DATA) => Ok(n),
            Some(RECORD_ALERT) if n >= 2 && buf[1] == CLOSE_NOTIFY => {
                self.closed = true;
                Ok(0)
            }
            Some(RECORD_ALERT) => Err(self.fail(TlsError::Record {
                peer: self.peer.clone(),
                source: rustls::Error::AlertReceived(buf.get(1).copied().unwrap_or(0).into()),
            })),
            Some(t) => Err(self.fail(TlsError::Ktls {
                peer: self.peer.clone(),
                detail: match t {
                    RECORD_HANDSHAKE => "a handshake record (key update or session ticket) arrived after the handshake; the kernel record layer cannot process it".into(),
                    t => format!("a record of type {t} arrived"),
                },
            })),
        }
    }
}
