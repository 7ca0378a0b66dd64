//! The limits that protect an agent from its clients, with Redis's names, units and
//! bounds: `proto-max-bulk-len`, `client-query-buffer-limit`, `maxclients` and
//! `client-output-buffer-limit`. Set from the agent's config at start and by
//! `CONFIG SET` at run time (atomics, read by every connection on every read);
//! `CONFIG GET` shows them as Redis does. The connection loop enforces them; this
//! module only holds and parses them.

use std::sync::atomic::{AtomicU64, Ordering};

use dmc_proto::ByteSize;

/// One class of `client-output-buffer-limit`: a hard limit in bytes, and a soft limit
/// that may be exceeded for at most `soft_seconds` (0 everywhere: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// `client-output-buffer-limit` for Redis's three client classes. Only `normal`
/// applies to DMC's clients today; the others are kept so `CONFIG GET` round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    pub normal: OutputLimit,
    pub replica: OutputLimit,
    pub pubsub: OutputLimit,
}

impl Default for OutputLimits {
    /// Redis's defaults: `normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60`.
    fn default() -> Self {
        OutputLimits {
            normal: OutputLimit::default(),
            replica: OutputLimit {
                hard: 256 << 20,
                soft: 64 << 20,
                soft_seconds: 60,
            },
            pubsub: OutputLimit {
                hard: 32 << 20,
                soft: 8 << 20,
                soft_seconds: 60,
            },
        }
    }
}

impl OutputLimits {
    /// Applies `class hard soft seconds` groups over the current values, as
    /// `CONFIG SET client-output-buffer-limit` does (all groups valid, or no change).
    pub fn parse_over(self, text: &str) -> Result<OutputLimits, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() || !words.len().is_multiple_of(4) {
            return Err("Wrong number of arguments in buffer limit configuration.".into());
        }
        let mut out = self;
        for group in words.chunks(4) {
            let size = |w: &str| {
                w.parse::<ByteSize>().map(|b| b.0).map_err(|_| {
                    "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                        .to_string()
                })
            };
            let limit = OutputLimit {
                hard: size(group[1])?,
                soft: size(group[2])?,
                soft_seconds: group[3].parse().map_err(|_| {
                    "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                        .to_string()
                })?,
            };
            match group[0].to_ascii_lowercase().as_str() {
                "normal" => out.normal = limit,
                "replica" | "slave" => out.replica = limit,
                "pubsub" => out.pubsub = limit,
                _ => {
                    return Err(
                        "Invalid client class specified in buffer limit configuration.".into(),
                    );
                }
            }
        }
        Ok(out)
    }

    /// The `CONFIG GET` form (bytes, Redis's class names).
    pub fn render(&self) -> String {
        let one = |name: &str, l: &OutputLimit| {
            format!("{name} {} {} {}", l.hard, l.soft, l.soft_seconds)
        };
        format!(
            "{} {} {}",
            one("normal", &self.normal),
            one("slave", &self.replica),
            one("pubsub", &self.pubsub)
        )
    }
}

/// The limits as a running agent holds them.
#[derive(Debug)]
pub struct ClientLimits {
    proto_max_bulk_len: AtomicU64,
    client_query_buffer_limit: AtomicU64,
    maxclients: AtomicU64,
    output: parking_lot::Mutex<OutputLimits>,
    /// `normal`'s values, read on every reply without the lock.
    normal_hard: AtomicU64,
    normal_soft: AtomicU64,
    normal_soft_seconds: AtomicU64,
}

/// Smallest `proto-max-bulk-len` and `client-query-buffer-limit` Redis accepts.
pub const MIN_BUFFER_LIMIT: u64 = 1 << 20;

/// Why a limit was refused, in the words Redis's CONFIG SET uses.
pub fn out_of_range(min: u64) -> String {
    format!("argument must be between {min} and {} inclusive", i64::MAX)
}

impl ClientLimits {
    pub fn new(
        proto_max_bulk_len: u64,
        client_query_buffer_limit: u64,
        maxclients: u64,
        output: OutputLimits,
    ) -> ClientLimits {
        let l = ClientLimits {
            proto_max_bulk_len: AtomicU64::new(proto_max_bulk_len),
            client_query_buffer_limit: AtomicU64::new(client_query_buffer_limit),
            maxclients: AtomicU64::new(maxclients),
            output: parking_lot::Mutex::new(output),
            normal_hard: AtomicU64::new(0),
            normal_soft: AtomicU64::new(0),
            normal_soft_seconds: AtomicU64::new(0),
        };
        l.publish(output);
        l
    }

    fn publish(&self, o: OutputLimits) {
        self.normal_hard.store(o.normal.hard, Ordering::Relaxed);
        self.normal_soft.store(o.normal.soft, Ordering::Relaxed);
        self.normal_soft_seconds
            .store(o.normal.soft_seconds, Ordering::Relaxed);
    }

    pub fn proto_max_bulk_len(&self) -> u64 {
        self.proto_max_bulk_len.load(Ordering::Relaxed)
    }

    pub fn client_query_buffer_limit(&self) -> u64 {
        self.client_query_buffer_limit.load(Ordering::Relaxed)
    }

    pub fn maxclients(&self) -> u64 {
        self.maxclients.load(Ordering::Relaxed)
    }

    /// `client-output-buffer-limit normal`.
    pub fn normal_output(&self) -> OutputLimit {
        OutputLimit {
            hard: self.normal_hard.load(Ordering::Relaxed),
            soft: self.normal_soft.load(Ordering::Relaxed),
            soft_seconds: self.normal_soft_seconds.load(Ordering::Relaxed),
        }
    }

    pub fn output(&self) -> OutputLimits {
        *self.output.lock()
    }

    /// `CONFIG SET` of one of the limits; `Ok(false)`: not a limit's name.
    pub fn set(&self, name: &str, value: &str) -> Result<bool, String> {
        let bytes = |min: u64| -> Result<u64, String> {
            let v = value
                .parse::<ByteSize>()
                .map_err(|_| "argument couldn't be parsed into an integer".to_string())?
                .0;
            if v < min || v > i64::MAX as u64 {
                return Err(out_of_range(min));
            }
            Ok(v)
        };
        match name {
            "proto-max-bulk-len" => self
                .proto_max_bulk_len
                .store(bytes(MIN_BUFFER_LIMIT)?, Ordering::Relaxed),
            "client-query-buffer-limit" => self
                .client_query_buffer_limit
                .store(bytes(MIN_BUFFER_LIMIT)?, Ordering::Relaxed),
            "maxclients" => self.maxclients.store(bytes(1)?, Ordering::Relaxed),
            "client-output-buffer-limit" => {
                let mut o = self.output.lock();
                let next = o.parse_over(value)?;
                *o = next;
                self.publish(next);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The `CONFIG GET` pairs.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        vec![
            ("proto-max-bulk-len", self.proto_max_bulk_len().to_string()),
            (
                "client-query-buffer-limit",
                self.client_query_buffer_limit().to_string(),
            ),
            ("maxclients", self.maxclients().to_string()),
            ("client-output-buffer-limit", self.output().render()),
        ]
    }
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits::new(512 << 20, 1 << 30, 10_000, OutputLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_limits_parse_and_render_as_redis_does() {
        let d = OutputLimits::default();
        assert_eq!(
            d.render(),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        let o = d.parse_over("normal 1mb 512kb 10").unwrap();
        assert_eq!(
            o.normal,
            OutputLimit {
                hard: 1 << 20,
                soft: 512 << 10,
                soft_seconds: 10
            }
        );
        assert_eq!(o.pubsub, d.pubsub);
        assert!(d.parse_over("normal 1mb 512kb").is_err());
        assert!(d.parse_over("bogus 0 0 0").is_err());
        assert!(d.parse_over("normal x 0 0").is_err());
    }

    #[test]
    fn config_set_checks_redis_bounds() {
        let l = ClientLimits::default();
        assert_eq!(l.set("proto-max-bulk-len", "2mb"), Ok(true));
        assert_eq!(l.proto_max_bulk_len(), 2 << 20);
        assert_eq!(
            l.set("proto-max-bulk-len", "1000"),
            Err(out_of_range(MIN_BUFFER_LIMIT))
        );
        assert_eq!(
            l.proto_max_bulk_len(),
            2 << 20,
            "a refused value changes nothing"
        );
        assert_eq!(l.set("maxclients", "0"), Err(out_of_range(1)));
        assert_eq!(
            l.set("client-output-buffer-limit", "normal 4mb 0 0"),
            Ok(true)
        );
        assert_eq!(l.normal_output().hard, 4 << 20);
        assert_eq!(l.set("timeout", "1"), Ok(false));
    }
}
