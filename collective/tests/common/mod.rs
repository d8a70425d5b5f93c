//! What the collective tests share: seeded data per rank, the host reference, and the
//! check (integers, max and min exact; float sums within the reduction-order tolerance
//! stated in `uhca_collective::dtype`).
#![allow(dead_code)]

use uhca_collective::mock::MockCluster;
use uhca_collective::{Config, Element, ReduceOp};
use uhca_mock::LinkLayer;

/// A small generator (xorshift64*), so each rank's data is reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Rank `rank`'s input of `count` elements for run `seed`: floats in [-8, 8) with
/// fractional bits, integers across the type's range.
pub fn input<T: Element>(seed: u64, rank: usize, count: usize) -> Vec<T> {
    let mut g = Rng::new(seed * 1000 + rank as u64 + 1);
    (0..count)
        .map(|_| {
            let x = g.next();
            if T::EPSILON > 0.0 {
                T::from_f64(((x >> 11) as f64 / (1u64 << 53) as f64) * 16.0 - 8.0)
            } else {
                T::from_f64((x >> 33) as i32 as f64)
            }
        })
        .collect()
}

/// The reduction of `inputs` in rank order, on the host: integers with the type's own
/// (wrapping) operation, floats in f64.
pub fn reference<T: Element>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<(f64, f64, T)> {
    let count = inputs[0].len();
    (0..count)
        .map(|i| {
            let exact = inputs
                .iter()
                .map(|v| v[i].to_f64())
                .reduce(|a, b| match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                })
                .unwrap();
            let abs: f64 = inputs.iter().map(|v| v[i].to_f64().abs()).sum();
            let int = inputs
                .iter()
                .map(|v| v[i])
                .reduce(|a, b| T::reduce(op, a, b))
                .unwrap();
            (exact, abs, int)
        })
        .collect()
}

/// How many elements of `got` are wrong against `want` for `n` ranks.
pub fn wrong<T: Element>(got: &[T], want: &[(f64, f64, T)], op: ReduceOp, n: usize) -> usize {
    got.iter()
        .zip(want)
        .filter(|(g, (exact, abs, int))| {
            if T::EPSILON == 0.0 || op != ReduceOp::Sum {
                if T::EPSILON == 0.0 {
                    **g != *int
                } else {
                    g.to_f64() != *exact
                }
            } else {
                (g.to_f64() - exact).abs() > n as f64 * T::EPSILON * abs
            }
        })
        .count()
}

pub fn cluster(n: usize, cfg: Config) -> MockCluster {
    MockCluster::new(n, LinkLayer::Ethernet, cfg).expect("the cluster comes up")
}

/// A small chunk and window, so that test sizes span many chunks and wrap the window.
pub fn small_chunks() -> Config {
    Config {
        chunk_bytes: 256,
        window: 3,
        ..Config::default()
    }
}
