//! A software prefetch of this process's own memory (the cached directory): a hint
//! that starts a cache line loading and returns at once, so a batch's lookups overlap
//! their misses. The pool's memory is prefetched through `Pool::prefetch`.

/// Starts loading the cache line that holds `value`.
pub(crate) fn line<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults and does not access memory
    // architecturally; the address is a live reference besides.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast::<i8>(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
