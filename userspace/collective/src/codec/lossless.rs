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

fn inflated_wrong(codec: CodecSpec, got: usize, want: usize) -> Result<(), CodecError> {
    if got == want {
        Ok(())
    } else {
        Err(CodecError::Corrupt {
            codec,
            reason: "decompressed to fewer bytes than the header claims",
        })
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
        write_header(self.spec(), src.len(), out)?;
        let at = out.len();
        out.resize(at + lz4_flex::block::get_maximum_output_size(src.len()), 0);
        let n = lz4_flex::block::compress_into(src, &mut out[at..])
            .map_err(|_| CodecError::BadParameters("lz4 output bound too small"))?;
        out.truncate(at + n);
        Ok(())
    }

    fn decode(&self, payload: &[u8], _dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let body = open(self.spec(), payload, dst.len())?;
        let n = lz4_flex::block::decompress_into(body, dst).map_err(|_| CodecError::Corrupt {
            codec: self.spec(),
            reason: "not an lz4 block of the claimed length",
        })?;
        inflated_wrong(self.spec(), n, dst.len())
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
        write_header(self.spec(), src.len(), out)?;
        let at = out.len();
        out.resize(at + zstd::zstd_safe::compress_bound(src.len()), 0);
        let n = ZSTD_ENC.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != self.level) {
                let z = zstd::bulk::Compressor::new(i32::from(self.level))
                    .map_err(|_| CodecError::BadParameters("zstd context"))?;
                *c = Some((self.level, z));
            }
            let (_, z) = c
                .as_mut()
                .ok_or(CodecError::BadParameters("zstd context"))?;
            z.compress_to_buffer(src, &mut out[at..])
                .map_err(|_| CodecError::BadParameters("zstd output bound too small"))
        })?;
        out.truncate(at + n);
        Ok(())
    }

    fn decode(&self, payload: &[u8], _dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let body = open(self.spec(), payload, dst.len())?;
        let corrupt = CodecError::Corrupt {
            codec: self.spec(),
            reason: "not a zstd frame of the claimed length",
        };
        let n = ZSTD_DEC.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            let z = d.as_mut().ok_or(corrupt.clone())?;
            z.decompress_to_buffer(body, dst)
                .map_err(|_| corrupt.clone())
        })?;
        inflated_wrong(self.spec(), n, dst.len())
    }
}
