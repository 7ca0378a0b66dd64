//! Profiling aid: load KEYS keys, then overwrite them all with 64 sets in flight.
//! `set_loop KEYS [local]`.
use dmc_benches::*;

fn main() {
    let rt = runtime();
    let n = arg(1, 200_000);
    let (_keep, dht) = loaded_table(&rt, n, std::env::args().nth(2).is_some());
    let took = rt.block_on(load(&dht, n, 64, None, false)).unwrap();
    let s = took.as_secs_f64();
    println!("{n} overwrites in {s:.2}s: {:.0} sets/s", n as f64 / s);
}
