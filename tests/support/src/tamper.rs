//! A TCP man-in-the-middle for tests of authenticated links: it copies one
//! direction of a proxied connection and can flip one bit on the way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

/// Copies `from` to `to` until `from` ends, flipping the low bit of the
/// byte at stream offset `flip` (if the stream gets that far), then shuts
/// `to` for writing.
pub fn forward(mut from: TcpStream, mut to: TcpStream, flip: Option<usize>) {
    let mut buf = [0u8; 4096];
    let mut seen = 0usize;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        if let Some(at) = flip.filter(|at| (seen..seen + n).contains(at)) {
            buf[at - seen] ^= 0x01;
        }
        seen += n;
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
