//! Key choice, as YCSB makes it: uniform, Zipfian (scrambled, so hot keys are spread
//! over the key space instead of clustered at low ids) and "latest" (Zipfian over
//! recency: the newest keys are the hottest). The Zipfian generator is Gray et al.'s
//! "Quickly generating billion-record synthetic databases", as in YCSB's
//! `ZipfianGenerator`, with θ = 0.99 by default.

use rand::{Rng, RngExt};

use super::workload::Size;

/// How requests pick keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    Uniform,
    Zipf(f64),
    Latest(f64),
}

impl std::str::FromStr for KeyDist {
    type Err = String;

    /// `uniform`, `zipf`, `zipf:0.9`, `latest`, `latest:0.99`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, theta) = match s.split_once(':') {
            Some((n, t)) => (
                n,
                t.parse::<f64>()
                    .map_err(|_| format!("bad Zipf exponent in {s:?}"))?,
            ),
            None => (s, 0.99),
        };
        if !(0.0..1.0).contains(&theta) || theta == 0.0 {
            return Err(format!("the Zipf exponent must be in (0, 1), got {theta}"));
        }
        match name {
            "uniform" => Ok(KeyDist::Uniform),
            "zipf" | "zipfian" => Ok(KeyDist::Zipf(theta)),
            "latest" => Ok(KeyDist::Latest(theta)),
            _ => Err(format!(
                "unknown key distribution {name:?} (uniform, zipf[:θ], latest[:θ])"
            )),
        }
    }
}

/// Draws Zipf-distributed ranks in `0..n` (rank 0 the most popular).
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// FNV-1a: spreads bytes over 64 bits cheaply.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// YCSB's scrambling of a rank, so popular keys are not neighbours.
fn scramble(rank: u64) -> u64 {
    fnv1a(&rank.to_le_bytes())
}

/// Chooses key ids for one connection.
#[derive(Debug, Clone)]
pub struct KeyChooser {
    dist: KeyDist,
    zipf: Option<Zipf>,
}

impl KeyChooser {
    /// For a key space of `keys` ids (the initially loaded ones).
    pub fn new(dist: KeyDist, keys: u64) -> KeyChooser {
        let zipf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(t) | KeyDist::Latest(t) => Some(Zipf::new(keys, t)),
        };
        KeyChooser { dist, zipf }
    }

    /// A key id below `existing` (the keys inserted so far).
    pub fn next(&self, rng: &mut impl Rng, existing: u64) -> u64 {
        let existing = existing.max(1);
        match (&self.dist, &self.zipf) {
            (KeyDist::Zipf(_), Some(z)) => scramble(z.sample(rng)) % existing,
            (KeyDist::Latest(_), Some(z)) => existing - 1 - z.sample(rng).min(existing - 1),
            _ => rng.random_range(0..existing),
        }
    }
}

/// The name of key `id`: `key:` and the zero-padded id, as long as `size` says (a fixed
/// length, or one drawn for this id from a range, the same every time) and at least as
/// long as the digits need.
pub fn key_name(id: u64, size: Size, out: &mut Vec<u8>) {
    let size = match size {
        Size::Fixed(n) => n,
        Size::Uniform(lo, hi) => lo + (scramble(id) % (hi - lo + 1) as u64) as usize,
    };
    out.clear();
    let digits = format!("{id}");
    let pad = size.saturating_sub(4 + digits.len());
    out.extend_from_slice(b"key:");
    out.extend(std::iter::repeat_n(b'0', pad));
    out.extend_from_slice(digits.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipf_favours_low_ranks_like_theory() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let z = Zipf::new(1000, 0.99);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        // P(rank 0) = 1 / zeta(1000, 0.99) ≈ 0.134.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((0.12..0.15).contains(&p0), "p0 = {p0}");
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
    }

    #[test]
    fn choosers_stay_in_range() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for dist in [KeyDist::Uniform, KeyDist::Zipf(0.99), KeyDist::Latest(0.99)] {
            let c = KeyChooser::new(dist, 100);
            for _ in 0..10_000 {
                assert!(c.next(&mut rng, 100) < 100);
                assert!(c.next(&mut rng, 150) < 150);
            }
        }
        // Latest: the newest keys are the hottest.
        let c = KeyChooser::new(KeyDist::Latest(0.99), 1000);
        let newest = (0..10_000)
            .filter(|_| c.next(&mut rng, 1000) >= 990)
            .count();
        assert!(newest > 3_000, "{newest}");
    }

    #[test]
    fn parses_distributions_and_names_keys() {
        assert_eq!("zipf".parse::<KeyDist>().unwrap(), KeyDist::Zipf(0.99));
        assert_eq!(
            "latest:0.5".parse::<KeyDist>().unwrap(),
            KeyDist::Latest(0.5)
        );
        assert!("zipf:1.5".parse::<KeyDist>().is_err());
        let mut k = Vec::new();
        key_name(42, Size::Fixed(16), &mut k);
        assert_eq!(k, b"key:000000000042");
        key_name(42, Size::Fixed(2), &mut k);
        assert_eq!(k, b"key:42");
        let range = Size::Uniform(16, 64);
        let lens: std::collections::HashSet<usize> = (0..200)
            .map(|id| {
                key_name(id, range, &mut k);
                let len = k.len();
                key_name(id, range, &mut k);
                assert_eq!(k.len(), len, "the same name every time");
                len
            })
            .collect();
        assert!(lens.len() > 10 && lens.iter().all(|l| (16..=64).contains(l)));
    }
}
