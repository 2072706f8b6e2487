//! Tensors passed in as DLPack capsules (`tensor.__dlpack__()`): the memory
//! they describe, checked (CPU or pinned host memory, one lane, contiguous
//! row-major, aligned, a dtype the library reduces), without a copy.
//!
//! The capsule is only borrowed: it is not renamed to `used_dltensor`, so its
//! own destructor (the producer's) frees the tensor when Python drops it.
//! Layouts from the DLPack header (`dlpack.h`, v0.8 ABI, the unversioned
//! `dltensor` capsule).
#![allow(unsafe_code)]

use std::ffi::c_void;

use causeway_collective::DType;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use crate::errors::argument;

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const CPU: i32 = 1;
const CUDA_HOST: i32 = 3;
const CPU_PINNED: i32 = 13;

/// Contiguous host memory of `len` elements of `dtype`, as a capsule describes it.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub ptr: *mut u8,
    pub len: usize,
    pub dtype: DType,
}

// SAFETY: a `View` is an address and a length; it is only turned into a slice
// (in `comm.rs`) while the capsule it came from is alive, on one thread at a time.
unsafe impl Send for View {}

impl View {
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }
    /// True when the byte ranges of `self` and `other` share any byte.
    pub fn overlaps(&self, other: &View) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        a < b + other.bytes() && b < a + self.bytes() && self.len > 0 && other.len > 0
    }
}

fn dtype_of(t: &DlDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    Some(match (t.code, t.bits) {
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        (2, 16) => DType::F16,
        (4, 16) => DType::Bf16,
        (0, 32) => DType::I32,
        (0, 64) => DType::I64,
        (1, 8) => DType::U8,
        _ => return None,
    })
}

/// Reads the tensor behind `capsule` (a `dltensor` capsule, not consumed).
/// `what` names the argument in errors.
pub fn view(capsule: &Bound<'_, PyAny>, what: &str) -> PyResult<View> {
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| {
        argument(format!(
            "{what}: expected a DLPack capsule (tensor.__dlpack__())"
        ))
    })?;
    let ptr = capsule
        .pointer_checked(Some(c"dltensor"))
        .map_err(|_| argument(format!("{what}: not an unused `dltensor` DLPack capsule")))?;
    // SAFETY: a capsule named `dltensor` holds a `DLManagedTensor` (DLPack's
    // contract), valid until the capsule's destructor runs, which cannot happen
    // while `capsule` is borrowed here.
    let m = unsafe { &*ptr.as_ptr().cast::<DlManagedTensor>() };
    let t = &m.dl_tensor;
    if !matches!(t.device.device_type, CPU | CUDA_HOST | CPU_PINNED) {
        return Err(argument(format!(
            "{what}: tensor is on DLPack device type {} (only host memory is passed to Causeway)",
            t.device.device_type
        )));
    }
    let dtype = dtype_of(&t.dtype).ok_or_else(|| {
        argument(format!(
            "{what}: DLPack dtype code {} bits {} lanes {} is not one of float32, float64, float16, bfloat16, int32, int64, uint8",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let ndim = usize::try_from(t.ndim).map_err(|_| argument(format!("{what}: negative ndim")))?;
    let dims = |p: *const i64| -> &[i64] {
        if ndim == 0 || p.is_null() {
            &[]
        } else {
            // SAFETY: DLPack: `shape` (and `strides` when not NULL) point at
            // `ndim` int64 values owned by the managed tensor.
            unsafe { std::slice::from_raw_parts(p, ndim) }
        }
    };
    let shape = dims(t.shape);
    if shape.len() != ndim {
        return Err(argument(format!("{what}: DLPack tensor without a shape")));
    }
    let mut len: usize = 1;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| argument(format!("{what}: negative dimension")))?;
        len = len
            .checked_mul(d)
            .ok_or_else(|| argument(format!("{what}: element count overflows")))?;
    }
    let strides = dims(t.strides);
    if !strides.is_empty() && !row_major(shape, strides) {
        return Err(argument(format!(
            "{what}: tensor is not contiguous (shape {shape:?}, strides {strides:?}); pass tensor.contiguous()"
        )));
    }
    let ptr = (t.data as *mut u8).wrapping_add(t.byte_offset as usize);
    if len > 0 && !(ptr as usize).is_multiple_of(dtype.size()) {
        return Err(argument(format!(
            "{what}: data at {ptr:p} is not aligned to its {}-byte elements",
            dtype.size()
        )));
    }
    Ok(View { ptr, len, dtype })
}

/// Compact row-major strides (dimensions of extent 1 may have any stride).
fn row_major(shape: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_strides() {
        assert!(row_major(&[2, 3], &[3, 1]));
        assert!(row_major(&[2, 1, 3], &[3, 99, 1]));
        assert!(!row_major(&[2, 3], &[1, 2]), "transposed");
        assert!(!row_major(&[4], &[2]), "every other element");
        assert!(row_major(&[0, 3], &[3, 1]));
    }

    #[test]
    fn dtypes() {
        let t = |code, bits| DlDataType {
            code,
            bits,
            lanes: 1,
        };
        assert_eq!(dtype_of(&t(4, 16)), Some(DType::Bf16));
        assert_eq!(dtype_of(&t(2, 16)), Some(DType::F16));
        assert_eq!(dtype_of(&t(1, 8)), Some(DType::U8));
        assert_eq!(dtype_of(&t(0, 8)), None, "int8 is not reduced");
        assert_eq!(dtype_of(&t(6, 8)), None, "bool");
        let mut v = t(2, 32);
        v.lanes = 4;
        assert_eq!(dtype_of(&v), None);
    }

    #[test]
    fn overlap() {
        let mut buf = [0u8; 64];
        let base = buf.as_mut_ptr();
        let v = |off: usize, len| View {
            ptr: base.wrapping_add(off),
            len,
            dtype: DType::F32,
        };
        assert!(v(0, 4).overlaps(&v(12, 4)));
        assert!(!v(0, 4).overlaps(&v(16, 4)));
        assert!(!v(0, 0).overlaps(&v(0, 4)));
    }
}
