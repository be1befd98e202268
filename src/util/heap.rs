//! Giving freed heap memory back to the OS.
//!
//! glibc's allocator keeps freed memory in its arenas for reuse. After a sweep has forgotten many
//! idle hosts (hundreds of bytes each; a million hosts is ~400 MiB), that memory would stay in
//! the process for good, although the promise is that memory returns close to the start.
//! `malloc_trim` hands every wholly free page of every arena back (since glibc 2.8 also pages in
//! the middle of the heap). It is the crate's only `unsafe` code: one call with an integer
//! argument, no pointers, no state of ours involved.

/// Returns free heap pages to the OS. A no-op on platforms without glibc. Takes a few
/// milliseconds per hundred MiB of heap and briefly holds the allocator's arena locks, so it is
/// meant for after a large sweep, not for every request.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim(3) takes a pad size and touches only the allocator's own state,
        // under the allocator's own locks; it is safe to call from any thread at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
unsafe extern "C" {
    fn malloc_trim(pad: usize) -> std::os::raw::c_int;
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_goes_back_to_the_os() {
        // Many small blocks (below the mmap threshold, so they live in the arena), freed again.
        let blocks: Vec<Vec<u8>> = (0..200_000).map(|i| vec![(i % 251) as u8; 400]).collect();
        let before = rss_kib();
        drop(blocks);
        super::release_free_memory();
        let after = rss_kib();
        // 200,000 × ~416 B ≈ 80 MiB were resident; most of it must have left (other tests in this
        // process allocate far less than the 40 MiB of slack).
        assert!(
            before.saturating_sub(after) > 40 * 1024,
            "RSS {before} KiB → {after} KiB"
        );
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS line");
        line.split_whitespace()
            .nth(1)
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS value")
    }
}
