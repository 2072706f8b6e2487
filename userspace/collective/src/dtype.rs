//! Element types and reduction kernels.
//!
//! Kernels work on little-endian byte slices (the wire format), so received
//! chunks never need to be aligned or copied into typed buffers first. Every
//! kernel is a plain element-wise loop in a fixed order: the same inputs give
//! the same bits on every rank.

use half::{bf16, f16};

/// Element type of a buffer, as carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    F32 = 1,
    F64 = 2,
    F16 = 3,
    Bf16 = 4,
    I32 = 5,
    I64 = 6,
    U8 = 7,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

/// Reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    /// Sum, then divided by the world size (integers: truncating division of the wrapping sum).
    Avg,
    Min,
    Max,
    /// Product (integers wrap on overflow).
    Prod,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Avg,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Prod,
    ];
}

/// A Rust type that can travel through a collective. Sealed: exactly the dtypes above.
pub trait Element:
    bytemuck::Pod + Send + Sync + PartialEq + std::fmt::Debug + sealed::Sealed
{
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(f16, DType::F16);
element!(bf16, DType::Bf16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(u8, DType::U8);

/// Combines `src` into `acc` element-wise: `acc[i] = acc[i] op src[i]`.
/// `Avg` accumulates like `Sum`; call [`finish`] once at the end.
/// Both slices must have the same length, a multiple of the element size.
///
/// Each (dtype, op) pair is its own monomorphic loop (no call per element),
/// so the compiler turns it into packed SIMD; when both slices are aligned
/// for the element type (the usual case: pooled buffers and typed user
/// buffers) the loop runs on typed slices, otherwise on little-endian bytes.
/// Either way element i depends only on `acc[i]` and `src[i]`: the bits are
/// the same on every rank.
pub fn reduce_into(dtype: DType, op: ReduceOp, acc: &mut [u8], src: &[u8]) {
    debug_assert_eq!(acc.len(), src.len());
    macro_rules! kernel {
        ($t:ty, $n:expr, $load:expr, $store:expr, $sum:expr, $min:expr, $max:expr, $prod:expr) => {
            match op {
                ReduceOp::Sum | ReduceOp::Avg => each::<$t, $n, _>(acc, src, $load, $store, $sum),
                ReduceOp::Min => each::<$t, $n, _>(acc, src, $load, $store, $min),
                ReduceOp::Max => each::<$t, $n, _>(acc, src, $load, $store, $max),
                ReduceOp::Prod => each::<$t, $n, _>(acc, src, $load, $store, $prod),
            }
        };
    }
    macro_rules! typed {
        ($t:ty, $n:expr, $load:expr, $store:expr, $sum:expr, $min:expr, $max:expr, $prod:expr) => {
            match op {
                ReduceOp::Sum | ReduceOp::Avg => {
                    each_typed::<$t, $n, _>(acc, src, $load, $store, $sum)
                }
                ReduceOp::Min => each_typed::<$t, $n, _>(acc, src, $load, $store, $min),
                ReduceOp::Max => each_typed::<$t, $n, _>(acc, src, $load, $store, $max),
                ReduceOp::Prod => each_typed::<$t, $n, _>(acc, src, $load, $store, $prod),
            }
        };
    }
    match dtype {
        DType::F32 => typed!(
            f32,
            4,
            ld_f32,
            st_f32,
            |a: f32, b: f32| a + b,
            f32::min,
            f32::max,
            |a: f32, b: f32| a * b
        ),
        DType::F64 => typed!(
            f64,
            8,
            ld_f64,
            st_f64,
            |a: f64, b: f64| a + b,
            f64::min,
            f64::max,
            |a: f64, b: f64| a * b
        ),
        DType::F16 => kernel!(
            f32,
            2,
            ld_f16,
            st_f16,
            |a: f32, b: f32| a + b,
            f32::min,
            f32::max,
            |a: f32, b: f32| a * b
        ),
        DType::Bf16 => kernel!(
            f32,
            2,
            ld_bf16,
            st_bf16,
            |a: f32, b: f32| a + b,
            f32::min,
            f32::max,
            |a: f32, b: f32| a * b
        ),
        DType::I32 => typed!(
            i32,
            4,
            ld_i32,
            st_i32,
            i32::wrapping_add,
            i32::min,
            i32::max,
            i32::wrapping_mul
        ),
        DType::I64 => typed!(
            i64,
            8,
            ld_i64,
            st_i64,
            i64::wrapping_add,
            i64::min,
            i64::max,
            i64::wrapping_mul
        ),
        DType::U8 => typed!(
            u8,
            1,
            ld_u8,
            st_u8,
            u8::wrapping_add,
            u8::min,
            u8::max,
            u8::wrapping_mul
        ),
    }
}

/// `acc[i] = f(acc[i], src[i])` over elements of `N` little-endian bytes.
#[inline(always)]
fn each<T, const N: usize, F: Fn(T, T) -> T>(
    acc: &mut [u8],
    src: &[u8],
    load: impl Fn(&[u8]) -> T,
    store: impl Fn(&mut [u8], T),
    f: F,
) {
    for (a, s) in acc.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
        let x = load(&*a);
        store(a, f(x, load(s)));
    }
}

/// [`each`] on typed slices when both are aligned for `T` (on a
/// little-endian machine the bytes are the values), bytewise otherwise.
#[inline(always)]
fn each_typed<T: bytemuck::Pod, const N: usize, F: Fn(T, T) -> T>(
    acc: &mut [u8],
    src: &[u8],
    load: impl Fn(&[u8]) -> T,
    store: impl Fn(&mut [u8], T),
    f: F,
) {
    if cfg!(target_endian = "little") {
        if let (Ok(a), Ok(s)) = (
            bytemuck::try_cast_slice_mut::<u8, T>(acc),
            bytemuck::try_cast_slice::<u8, T>(src),
        ) {
            for (a, s) in a.iter_mut().zip(s) {
                *a = f(*a, *s);
            }
            return;
        }
    }
    each::<T, N, F>(acc, src, load, store, f)
}

/// Final step of a reduction: divides by `world` for `Avg`, no-op otherwise.
pub fn finish(dtype: DType, op: ReduceOp, buf: &mut [u8], world: usize) {
    if op != ReduceOp::Avg || world <= 1 {
        return;
    }
    macro_rules! div {
        ($n:expr, $load:expr, $store:expr, $f:expr) => {
            for a in buf.chunks_exact_mut($n) {
                let x = $load(&*a);
                $store(a, $f(x));
            }
        };
    }
    let w = world;
    match dtype {
        DType::F32 => div!(4, ld_f32, st_f32, |x: f32| x / w as f32),
        DType::F64 => div!(8, ld_f64, st_f64, |x: f64| x / w as f64),
        DType::F16 => div!(2, ld_f16, st_f16, |x: f32| x / w as f32),
        DType::Bf16 => div!(2, ld_bf16, st_bf16, |x: f32| x / w as f32),
        DType::I32 => div!(4, ld_i32, st_i32, |x: i32| (x as i64 / w as i64) as i32),
        DType::I64 => div!(8, ld_i64, st_i64, |x: i64| x / w as i64),
        DType::U8 => div!(1, ld_u8, st_u8, |x: u8| (x as usize / w) as u8),
    }
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}
fn ld_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes(arr(b))
}
fn st_f32(b: &mut [u8], v: f32) {
    b.copy_from_slice(&v.to_le_bytes())
}
fn ld_f64(b: &[u8]) -> f64 {
    f64::from_le_bytes(arr(b))
}
fn st_f64(b: &mut [u8], v: f64) {
    b.copy_from_slice(&v.to_le_bytes())
}
fn ld_f16(b: &[u8]) -> f32 {
    f16::from_le_bytes(arr(b)).to_f32()
}
fn st_f16(b: &mut [u8], v: f32) {
    b.copy_from_slice(&f16::from_f32(v).to_le_bytes())
}
fn ld_bf16(b: &[u8]) -> f32 {
    bf16::from_le_bytes(arr(b)).to_f32()
}
fn st_bf16(b: &mut [u8], v: f32) {
    b.copy_from_slice(&bf16::from_f32(v).to_le_bytes())
}
fn ld_i32(b: &[u8]) -> i32 {
    i32::from_le_bytes(arr(b))
}
fn st_i32(b: &mut [u8], v: i32) {
    b.copy_from_slice(&v.to_le_bytes())
}
fn ld_i64(b: &[u8]) -> i64 {
    i64::from_le_bytes(arr(b))
}
fn st_i64(b: &mut [u8], v: i64) {
    b.copy_from_slice(&v.to_le_bytes())
}
fn ld_u8(b: &[u8]) -> u8 {
    b[0]
}
fn st_u8(b: &mut [u8], v: u8) {
    b[0] = v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn sum_min_max_prod_f32() {
        let a = [1.0f32, -2.0, 3.5];
        let b = [0.5f32, 4.0, -1.0];
        for (op, want) in [
            (ReduceOp::Sum, [1.5f32, 2.0, 2.5]),
            (ReduceOp::Min, [0.5, -2.0, -1.0]),
            (ReduceOp::Max, [1.0, 4.0, 3.5]),
            (ReduceOp::Prod, [0.5, -8.0, -3.5]),
        ] {
            let mut acc = bytes(&a);
            reduce_into(DType::F32, op, &mut acc, &bytes(&b));
            assert_eq!(acc, bytes(&want), "{op:?}");
        }
    }

    /// The typed (aligned) and bytewise (misaligned) loops give the same
    /// bits for every dtype and op.
    #[test]
    fn aligned_and_misaligned_kernels_agree() {
        let n = 1000;
        for dtype in DType::ALL {
            let len = n * dtype.size();
            // Varied bytes; a float's top byte is kept below 0x40 (finite
            // values, no NaN whose payload could differ).
            let float = !matches!(dtype, DType::I32 | DType::I64 | DType::U8);
            let gen = |m: usize, p: usize| -> Vec<u8> {
                (0..len)
                    .map(|i| {
                        let x = (i * m % p) as u8;
                        if float && i % dtype.size() == dtype.size() - 1 {
                            x & 0x3f
                        } else {
                            x
                        }
                    })
                    .collect()
            };
            let (a, b) = (gen(37, 251), gen(91, 241));
            for op in ReduceOp::ALL {
                // u64 storage: aligned for every dtype.
                let mut wa = vec![0u64; len / 8 + 2];
                let mut wb = vec![0u64; len / 8 + 2];
                let (ab, bb) = (
                    &mut bytemuck::cast_slice_mut::<u64, u8>(&mut wa)[..len],
                    &mut bytemuck::cast_slice_mut::<u64, u8>(&mut wb)[..len],
                );
                ab.copy_from_slice(&a);
                bb.copy_from_slice(&b);
                reduce_into(dtype, op, ab, bb);
                let mut ma = vec![0u8; len + 2];
                let mut mb = vec![0u8; len + 2];
                let (sa, sb) = (
                    1 + (ma.as_ptr() as usize & 1),
                    1 + (mb.as_ptr() as usize & 1),
                );
                let (odd_a, odd_b) = (&mut ma[sa..sa + len], &mut mb[sb..sb + len]);
                odd_a.copy_from_slice(&a);
                odd_b.copy_from_slice(&b);
                reduce_into(dtype, op, odd_a, odd_b);
                assert_eq!(&ab[..], &odd_a[..], "{dtype:?} {op:?}");
            }
        }
    }

    #[test]
    fn avg_divides_once_and_integers_wrap() {
        let mut acc = bytes(&[i32::MAX, 7]);
        reduce_into(DType::I32, ReduceOp::Avg, &mut acc, &bytes(&[1i32, 7]));
        finish(DType::I32, ReduceOp::Avg, &mut acc, 2);
        assert_eq!(acc, bytes(&[i32::MIN / 2, 7]));
        let mut u = vec![200u8];
        reduce_into(DType::U8, ReduceOp::Sum, &mut u, &[100]);
        assert_eq!(u, [44]);
    }

    #[test]
    fn half_types_round_through_f32() {
        let mut acc = bytes(&[f16::from_f32(1.5), f16::from_f32(-2.0)]);
        reduce_into(
            DType::F16,
            ReduceOp::Sum,
            &mut acc,
            &bytes(&[f16::from_f32(0.25), f16::ONE]),
        );
        assert_eq!(acc, bytes(&[f16::from_f32(1.75), f16::from_f32(-1.0)]));
        let mut acc = bytes(&[bf16::from_f32(3.0)]);
        reduce_into(
            DType::Bf16,
            ReduceOp::Max,
            &mut acc,
            &bytes(&[bf16::from_f32(4.0)]),
        );
        assert_eq!(acc, bytes(&[bf16::from_f32(4.0)]));
    }
}
