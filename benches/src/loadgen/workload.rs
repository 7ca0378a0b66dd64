//! Workloads: the YCSB core mixes mapped onto Redis strings, or a custom mix.
//!
//! | workload | mix | keys |
//! |---|---|---|
//! | A | 50 % read (GET), 50 % update (SET) | Zipfian |
//! | B | 95 % read, 5 % update | Zipfian |
//! | C | 100 % read | Zipfian |
//! | D | 95 % read, 5 % insert (SET of a new key) | latest |
//! | F | 50 % read, 50 % read-modify-write (GET then SET of that key) | Zipfian |
//! | custom | `--read R --update U --insert I --rmw M` (weights) | `--keys-dist` |

use rand::{Rng, RngExt};

use super::keys::KeyDist;

/// One logical operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Update,
    Insert,
    /// GET then SET of the same key: two requests.
    ReadModifyWrite,
}

/// Weights of each operation (need not sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub rmw: f64,
}

impl Mix {
    pub fn pick(&self, rng: &mut impl Rng) -> Op {
        let total = self.read + self.update + self.insert + self.rmw;
        let mut x = rng.random::<f64>() * total;
        for (w, op) in [
            (self.read, Op::Read),
            (self.update, Op::Update),
            (self.insert, Op::Insert),
        ] {
            if x < w {
                return op;
            }
            x -= w;
        }
        Op::ReadModifyWrite
    }

    pub fn writes(&self) -> bool {
        self.update + self.insert + self.rmw > 0.0
    }
}

/// A named workload's mix and default key distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub mix: Mix,
    pub dist: KeyDist,
}

impl Workload {
    /// `a`, `b`, `c`, `d`, `f` (YCSB) with Zipf exponent `theta`.
    pub fn ycsb(name: &str, theta: f64) -> Option<Workload> {
        let m = |read, update, insert, rmw| Mix {
            read,
            update,
            insert,
            rmw,
        };
        Some(match name.to_ascii_lowercase().as_str() {
            "a" => Workload {
                name: "ycsb-a",
                mix: m(0.5, 0.5, 0.0, 0.0),
                dist: KeyDist::Zipf(theta),
            },
            "b" => Workload {
                name: "ycsb-b",
                mix: m(0.95, 0.05, 0.0, 0.0),
                dist: KeyDist::Zipf(theta),
            },
            "c" => Workload {
                name: "ycsb-c",
                mix: m(1.0, 0.0, 0.0, 0.0),
                dist: KeyDist::Zipf(theta),
            },
            "d" => Workload {
                name: "ycsb-d",
                mix: m(0.95, 0.0, 0.05, 0.0),
                dist: KeyDist::Latest(theta),
            },
            "f" => Workload {
                name: "ycsb-f",
                mix: m(0.5, 0.0, 0.0, 0.5),
                dist: KeyDist::Zipf(theta),
            },
            _ => return None,
        })
    }
}

/// Value sizes: fixed, or uniform in a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Fixed(usize),
    Uniform(usize, usize),
}

impl Size {
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        match *self {
            Size::Fixed(n) => n,
            Size::Uniform(lo, hi) => rng.random_range(lo..=hi),
        }
    }

    pub fn max(&self) -> usize {
        match *self {
            Size::Fixed(n) | Size::Uniform(_, n) => n,
        }
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size::Fixed(n) => write!(f, "{n}"),
            Size::Uniform(lo, hi) => write!(f, "{lo}-{hi}"),
        }
    }
}

impl std::str::FromStr for Size {
    type Err = String;

    /// `32` or `16-512`.
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad size {t:?} (a byte count, or MIN-MAX)"))
        };
        match s.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("size range {s:?} is empty"));
                }
                Ok(Size::Uniform(lo, hi))
            }
            None => Ok(Size::Fixed(num(s)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mixes_follow_their_weights() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let b = Workload::ycsb("b", 0.99).unwrap();
        let reads = (0..100_000)
            .filter(|_| b.mix.pick(&mut rng) == Op::Read)
            .count();
        assert!((94_000..96_000).contains(&reads), "{reads}");
        let c = Workload::ycsb("C", 0.99).unwrap();
        assert!((0..1000).all(|_| c.mix.pick(&mut rng) == Op::Read));
        assert!(!c.mix.writes());
        let f = Workload::ycsb("f", 0.99).unwrap();
        assert!((0..1000).any(|_| f.mix.pick(&mut rng) == Op::ReadModifyWrite));
        assert!(Workload::ycsb("e", 0.99).is_none());
    }

    #[test]
    fn sizes_parse_and_pick_in_range() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        assert_eq!("32".parse::<Size>().unwrap(), Size::Fixed(32));
        let s: Size = "16-64".parse().unwrap();
        assert!((0..1000).all(|_| (16..=64).contains(&s.pick(&mut rng))));
        assert!("64-16".parse::<Size>().is_err());
    }
}
