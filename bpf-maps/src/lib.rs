//! Types and map names shared by Causeway's eBPF programs (`ebpf/`) and its
//! userspace (`userspace/`). Nothing shared is defined anywhere else.
//!
//! Every type is `#[repr(C)]`, has no implicit padding (checked by the
//! `assert_no_padding!` constants below) and implements `aya::Pod` when the
//! `user` feature is on. This crate holds no logic beyond constructors that
//! encode a documented key layout (both sides must build keys alike) and
//! the token-bucket arithmetic both sides run ([`gcra`]).
#![no_std]
#![deny(unsafe_code)]

/// Where userspace pins the programs and maps:
/// `<pin root>/<scope>/<iface>/`[`MAPS_DIR`]`/<map name>` (the CLI and the
/// agent write it; the collective library reads the clock map there).
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/causeway";
/// The directory of an interface's pinned maps, under its pin directory.
pub const MAPS_DIR: &str = "maps";

pub mod classifier;
pub mod clock;
pub mod counters;
pub mod gcra;
pub mod log;
pub mod paths;
pub mod programs;
pub mod shaper;

/// Compile-time check that a type's size equals the sum of its fields' sizes,
/// i.e. the compiler inserted no padding that the kernel could leave
/// uninitialised.
#[macro_export]
macro_rules! assert_no_padding {
    ($ty:ty, $($field:ty),+ $(,)?) => {
        const _: () = assert!(
            core::mem::size_of::<$ty>() == 0 $(+ core::mem::size_of::<$field>())+,
            concat!("padding in ", stringify!($ty))
        );
    };
}

/// Implements `aya::Pod` for shared types on the userspace side.
#[macro_export]
macro_rules! impl_pod {
    ($($ty:ty),+ $(,)?) => {
        $(
            #[cfg(feature = "user")]
            #[allow(unsafe_code)]
            // SAFETY: the type is #[repr(C)], Copy, has no padding (checked by
            // assert_no_padding!) and every bit pattern is a valid value.
            unsafe impl aya::Pod for $ty {}
        )+
    };
}
