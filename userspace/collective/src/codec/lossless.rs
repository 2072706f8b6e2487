//! Lossless codecs for anything that must arrive bit-exact (parameters,
//! broadcasts): an lz4 block (`lz4_flex`) or a zstd frame (`zstd`).
//!
//! Both decompress into the caller's destination, so a payload can never make
//! the decoder allocate: one that would inflate past the raw length it claims
//! (a decompression bomb) or to fewer bytes is [`CodecError::Corrupt`]. The
//! zstd contexts are kept per thread (creating one costs more than a chunk).

use std::cell::RefCell;

use super::{open, write_header, Codec, CodecError, CodecSpec};
use crate::dtype::DType;

pub(super) struct Lz4;
pub(super) struct Zstd {
    pub level: u8,
}

thread_local! {
    static ZSTD_ENC: RefCell<Option<(u8, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_DEC: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Appends the header of `spec` and what `compress` writes of `src` into a
/// body of at most `bound` bytes (it returns how many) to `out`.
fn encode_bounded(
    spec: CodecSpec,
    src: &[u8],
    bound: usize,
    out: &mut Vec<u8>,
    compress: impl FnOnce(&[u8], &mut [u8]) -> Result<usize, CodecError>,
) -> Result<(), CodecError> {
    write_header(spec, src.len(), out)?;
    let at = out.len();
    out.resize(at + bound, 0);
    let n = compress(src, &mut out[at..])?;
    out.truncate(at + n);
    Ok(())
}

/// Checks `payload`'s header and inflates its body into exactly `dst` with
/// `inflate` (which never writes past `dst` and returns how many bytes it
/// wrote, `None` for a body it cannot read): fewer bytes, more (a bomb) or
/// an unreadable body is [`CodecError::Corrupt`] with `unreadable` as the reason.
fn decode_exact(
    spec: CodecSpec,
    payload: &[u8],
    dst: &mut [u8],
    unreadable: &'static str,
    inflate: impl FnOnce(&[u8], &mut [u8]) -> Option<usize>,
) -> Result<(), CodecError> {
    let body = open(spec, payload, dst.len())?;
    let corrupt = |reason| CodecError::Corrupt {
        codec: spec,
        reason,
    };
    match inflate(body, dst) {
        None => Err(corrupt(unreadable)),
        Some(n) if n != dst.len() => Err(corrupt(
            "decompressed to fewer bytes than the header claims",
        )),
        Some(_) => Ok(()),
    }
}

impl Codec for Lz4 {
    fn spec(&self) -> CodecSpec {
        CodecSpec::Lz4
    }

    fn encode(
        &self,
        src: &[u8],
        _dtype: DType,
        _seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let bound = lz4_flex::block::get_maximum_output_size(src.len());
        encode_bounded(self.spec(), src, bound, out, |src, body| {
            lz4_flex::block::compress_into(src, body)
                .map_err(|_| CodecError::BadParameters("lz4 output bound too small"))
        })
    }

    fn decode(&self, payload: &[u8], _dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let why = "not an lz4 block of the claimed length";
        decode_exact(self.spec(), payload, dst, why, |body, dst| {
            lz4_flex::block::decompress_into(body, dst).ok()
        })
    }
}

impl Codec for Zstd {
    fn spec(&self) -> CodecSpec {
        CodecSpec::Zstd { level: self.level }
    }

    fn encode(
        &self,
        src: &[u8],
        _dtype: DType,
        _seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let bound = zstd::zstd_safe::compress_bound(src.len());
        encode_bounded(self.spec(), src, bound, out, |src, body| {
            ZSTD_ENC.with(|c| {
                let mut c = c.borrow_mut();
                if c.as_ref().is_none_or(|(l, _)| *l != self.level) {
                    let z = zstd::bulk::Compressor::new(i32::from(self.level))
                        .map_err(|_| CodecError::BadParameters("zstd context"))?;
                    *c = Some((self.level, z));
                }
                let (_, z) = c
                    .as_mut()
                    .ok_or(CodecError::BadParameters("zstd context"))?;
                z.compress_to_buffer(src, body)
                    .map_err(|_| CodecError::BadParameters("zstd output bound too small"))
            })
        })
    }

    fn decode(&self, payload: &[u8], _dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let why = "not a zstd frame of the claimed length";
        decode_exact(self.spec(), payload, dst, why, |body, dst| {
            ZSTD_DEC.with(|d| {
                let mut d = d.borrow_mut();
                if d.is_none() {
                    *d = zstd::bulk::Decompressor::new().ok();
                }
                d.as_mut()?.decompress_to_buffer(body, dst).ok()
            })
        })
    }
}
