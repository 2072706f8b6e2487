//! A reader that never reads past the end of the TLS record it is in.
//!
//! rustls reads as much ciphertext as a call returns; whatever follows the
//! handshake in that read (the peer's first records) would be held in
//! rustls' buffer, where the kernel never sees it. Before a connection may
//! be handed to kTLS its reads go through a [`Cork`]: the 5-byte record
//! header first, then at most that record's body, so rustls has consumed
//! exactly whole records and the socket holds the rest.

use std::io::{self, Read};

/// Where the reader is within the record stream.
#[derive(Debug, Default)]
pub struct Cork {
    header: [u8; 5],
    /// Header bytes read from the socket / handed out.
    have: usize,
    given: usize,
    /// Body bytes of the current record still to read.
    body_left: usize,
}

impl Cork {
    /// At a record boundary: nothing of the next record has been read.
    pub fn at_boundary(&self) -> bool {
        self.have == 0
    }

    /// Reads from `src` no further than the end of the current record.
    pub fn read(&mut self, src: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.have < self.header.len() {
            match src.read(&mut self.header[self.have..])? {
                0 if self.have == 0 => return Ok(0),
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => self.have += n,
            }
            if self.have == self.header.len() {
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        }
        if self.given < self.header.len() {
            let n = (self.header.len() - self.given).min(buf.len());
            buf[..n].copy_from_slice(&self.header[self.given..self.given + n]);
            self.given += n;
            self.finish_if_done();
            return Ok(n);
        }
        let want = self.body_left.min(buf.len());
        let n = src.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.body_left -= n;
        self.finish_if_done();
        Ok(n)
    }

    fn finish_if_done(&mut self) {
        if self.given == self.header.len() && self.body_left == 0 {
            (self.have, self.given) = (0, 0);
        }
    }
}

/// A socket read through a [`Cork`] and written directly (for rustls'
/// `complete_io`).
pub struct Corked<'a, S> {
    pub cork: &'a mut Cork,
    pub sock: &'a mut S,
}

impl<S: Read> Read for Corked<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.cork.read(self.sock, buf)
    }
}

impl<S: io::Write> io::Write for Corked<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![kind, 3, 3];
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn reads_stop_at_each_record_end_and_leave_the_rest_in_the_source() {
        let (a, b) = (record(22, &[7; 300]), record(23, &[9; 40]));
        let stream = [a.clone(), b.clone()].concat();
        let mut src = &stream[..];
        let mut cork = Cork::default();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < a.len() {
            let n = cork.read(&mut src, &mut buf).expect("read");
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, a, "exactly the first record");
        assert!(cork.at_boundary());
        assert_eq!(src, &b[..], "the second record is still unread");
    }

    #[test]
    fn tiny_buffers_and_an_empty_body_work_and_a_cut_record_is_an_error() {
        let stream = [record(21, &[]), record(23, &[1, 2, 3])].concat();
        let mut src = &stream[..];
        let mut cork = Cork::default();
        let mut got = Vec::new();
        let mut one = [0u8; 1];
        loop {
            match cork.read(&mut src, &mut one).expect("read") {
                0 => break,
                n => got.extend_from_slice(&one[..n]),
            }
        }
        assert_eq!(got, stream);
        assert!(cork.at_boundary());
        let cut = record(23, &[5; 10]);
        let mut src = &cut[..8];
        let mut cork = Cork::default();
        let mut buf = [0u8; 64];
        assert_eq!(cork.read(&mut src, &mut buf).expect("header"), 5);
        assert_eq!(cork.read(&mut src, &mut buf).expect("part"), 3);
        assert!(!cork.at_boundary());
        let e = cork.read(&mut src, &mut buf).expect_err("cut");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
