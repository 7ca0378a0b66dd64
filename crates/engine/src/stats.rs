//! Server-wide counters for `INFO` and metrics, the instantaneous rates Redis reports
//! (sampled every 100 ms over the last 1.6 s, as Redis does), and process figures
//! (RSS, CPU time, system memory) read from the OS.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// Samples kept for the instantaneous rates: 16 × 100 ms.
const SAMPLES: usize = 16;

#[derive(Debug, Default)]
pub struct Stats {
    pub commands: AtomicU64,
    pub connections_received: AtomicU64,
    pub connected_clients: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub error_replies: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub reads_processed: AtomicU64,
    pub writes_processed: AtomicU64,
    /// Highest pool `used_memory` seen by a sample or an `INFO`.
    pub used_memory_peak: AtomicU64,
    /// Writes sent to the agent owning their hash slot (proxy mode).
    pub forwarded_commands: AtomicU64,
    /// `-MOVED` redirections sent (cluster mode).
    pub moved_replies: AtomicU64,
    /// Open connections to other agents, for forwarded writes.
    pub peer_connections: AtomicU64,
    /// This agent's id at the cluster manager (0: standalone).
    pub agent_id: AtomicU64,
    /// The cluster map version this agent follows (0: standalone).
    pub map_version: AtomicU64,
    /// Hash slots this agent writes.
    pub owned_slots: AtomicU64,
    /// Memory nodes of the pool, and how many of them this agent is connected to now
    /// (connections open on first use and close when idle).
    pub pool_nodes: AtomicU64,
    pub pool_connections: AtomicU64,
    /// Warm-cache updates received from the primaries of shards this agent backs up.
    pub warm_fed: AtomicU64,
    /// Warm-cache updates for backups this agent (a primary) could not deliver.
    pub warm_feed_dropped: AtomicU64,
    /// Warm keys a takeover found equal to the pool, and found changed or gone.
    pub warm_confirmed: AtomicU64,
    pub warm_stale: AtomicU64,
    /// Collection changes committed by a same-key batch ([`crate::combine`]), and
    /// the batches (their commits).
    pub combined_changes: AtomicU64,
    pub combined_batches: AtomicU64,
    samples: Mutex<VecDeque<Sample>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    commands: u64,
    input: u64,
    output: u64,
}

/// Per-second rates over the sampled window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub ops_per_sec: u64,
    pub input_kbps: f64,
    pub output_kbps: f64,
}

impl Stats {
    /// Counts a same-key batch of `n` changes.
    pub fn combined(&self, n: usize) {
        self.combined_changes.fetch_add(n as u64, Ordering::Relaxed);
        self.combined_batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one rate sample; the agent calls this every 100 ms.
    pub fn sample(&self, used_memory: u64) {
        self.note_memory(used_memory);
        let s = Sample {
            at: Instant::now(),
            commands: self.commands.load(Ordering::Relaxed),
            input: self.net_input_bytes.load(Ordering::Relaxed),
            output: self.net_output_bytes.load(Ordering::Relaxed),
        };
        let mut q = self.samples.lock();
        if q.len() == SAMPLES {
            q.pop_front();
        }
        q.push_back(s);
    }

    pub fn note_memory(&self, used_memory: u64) {
        self.used_memory_peak
            .fetch_max(used_memory, Ordering::Relaxed);
    }

    pub fn rates(&self) -> Rates {
        let q = self.samples.lock();
        let (Some(first), Some(last)) = (q.front(), q.back()) else {
            return Rates::default();
        };
        let secs = last.at.duration_since(first.at).as_secs_f64();
        if secs <= 0.0 {
            return Rates::default();
        }
        // Saturating: a RESETSTAT between two samples must not wrap.
        Rates {
            ops_per_sec: (last.commands.saturating_sub(first.commands) as f64 / secs).round()
                as u64,
            input_kbps: last.input.saturating_sub(first.input) as f64 / secs / 1024.0,
            output_kbps: last.output.saturating_sub(first.output) as f64 / secs / 1024.0,
        }
    }

    /// Zeroes what `CONFIG RESETSTAT` resets.
    pub fn reset(&self) {
        for c in [
            &self.commands,
            &self.connections_received,
            &self.rejected_connections,
            &self.error_replies,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.reads_processed,
            &self.writes_processed,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.samples.lock().clear();
    }
}

/// This process's resident set size in bytes (0 where `/proc` is missing).
pub fn rss_bytes() -> u64 {
    let page = 4096;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// The machine's memory in bytes (0 where `/proc` is missing).
pub fn system_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU seconds used (system, user) by this process and by its children.
pub fn cpu_seconds() -> [f64; 4] {
    let usage = |who| {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `getrusage` writes a `rusage` into the pointer we give it, which points
        // at a zeroed, properly sized and aligned value; we read it only on success.
        let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
        if rc != 0 {
            return (0.0, 0.0);
        }
        // SAFETY: `getrusage` succeeded, so the value is initialised.
        let ru = unsafe { ru.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (secs(ru.ru_stime), secs(ru.ru_utime))
    };
    let (sys, user) = usage(libc::RUSAGE_SELF);
    let (csys, cuser) = usage(libc::RUSAGE_CHILDREN);
    [sys, user, csys, cuser]
}

/// A byte count as Redis's `*_human` fields print it (`1.50M`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.2}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_the_sample_window() {
        let s = Stats::default();
        assert_eq!(s.rates(), Rates::default(), "no samples yet");
        s.sample(10);
        s.commands.fetch_add(500, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        s.sample(5);
        assert!(s.rates().ops_per_sec > 0);
        assert_eq!(s.used_memory_peak.load(Ordering::Relaxed), 10);
        s.reset();
        assert_eq!(s.rates(), Rates::default());
    }

    #[test]
    fn human_sizes_match_redis() {
        assert_eq!(human(900), "900B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(3 << 30), "3.00G");
    }

    #[test]
    fn process_figures_are_read() {
        assert!(rss_bytes() > 0 && system_memory_bytes() > 0);
        let [sys, user, _, _] = cpu_seconds();
        assert!(sys >= 0.0 && user >= 0.0);
    }
}
