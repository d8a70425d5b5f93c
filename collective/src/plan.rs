//! What one pass of a collective sends and receives, as two streams of chunks.
//!
//! A pass talks to two peers: it sends a stream of chunks to `next` and receives a stream
//! from `prev` (the same peer for a pairwise exchange). Each stream is a number of steps;
//! each step carries one segment of the caller's buffer, cut into chunks of at most
//! `chunk_elems` elements. Step `t` of a stream carries segment `(first − t) mod parts`.
//!
//! The outbound stream either starts with one step of the caller's own data
//! (`out_initial_step`) and then forwards, step for step, what came in (outbound step
//! `t + 1` is inbound step `t`), or forwards from its first step (outbound step `t` is
//! inbound step `t`). Forwarded chunks are read from the caller's buffer after the
//! inbound chunk was reduced or copied into it, so a chunk can leave as soon as it
//! arrived: the ring is pipelined chunk by chunk, not step by step.

use crate::dtype::ReduceOp;
use core::ops::Range;

/// The buffer cut into `parts` near-equal segments: segment `k` is elements
/// `k·total/parts .. (k+1)·total/parts` (so a buffer of N blocks of `count` gives the
/// blocks exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segments {
    pub total: usize,
    pub parts: usize,
}

impl Segments {
    pub fn range(&self, k: usize) -> Range<usize> {
        let at = |k: usize| ((self.total as u128 * k as u128) / self.parts as u128) as usize;
        at(k)..at(k + 1)
    }
}

/// A stream of `steps` steps, step `t` carrying segment `(first − t) mod parts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stream {
    pub first: usize,
    pub steps: usize,
}

/// One pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Peer the outbound stream goes to (ignored when it has no steps).
    pub next: usize,
    /// Peer the inbound stream comes from (ignored when it has no steps).
    pub prev: usize,
    pub segs: Segments,
    pub out: Stream,
    pub inp: Stream,
    /// Whether outbound step 0 is the caller's own data (else everything is forwarded).
    pub out_initial_step: bool,
    /// Inbound steps below this are reduced into the buffer; the rest are copied.
    pub reduce_steps: usize,
    pub op: ReduceOp,
    /// The collective's step number of this pass's step 0 (for errors).
    pub step_base: u32,
}

impl Plan {
    pub fn seg_of(&self, s: &Stream, t: usize) -> Range<usize> {
        let parts = self.segs.parts;
        let k = (s.first + parts - t % parts) % parts;
        self.segs.range(k)
    }

    /// Chunks in step `t` of stream `s`.
    pub fn chunks_in_step(&self, s: &Stream, t: usize, chunk_elems: usize) -> usize {
        self.seg_of(s, t).len().div_ceil(chunk_elems)
    }

    /// Chunks in the whole stream.
    pub fn chunks(&self, s: &Stream, chunk_elems: usize) -> usize {
        (0..s.steps)
            .map(|t| self.chunks_in_step(s, t, chunk_elems))
            .sum()
    }
}

/// A position in a stream: the step, and the chunk within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub step: usize,
    pub chunk: usize,
}

impl Cursor {
    /// The first chunk of `s` (skipping empty segments).
    pub fn start(plan: &Plan, s: &Stream, chunk_elems: usize) -> Cursor {
        let mut c = Cursor { step: 0, chunk: 0 };
        c.skip_empty(plan, s, chunk_elems);
        c
    }

    fn skip_empty(&mut self, plan: &Plan, s: &Stream, chunk_elems: usize) {
        while self.step < s.steps && self.chunk >= plan.chunks_in_step(s, self.step, chunk_elems) {
            self.step += 1;
            self.chunk = 0;
        }
    }

    /// The elements of the chunk under the cursor.
    pub fn range(&self, plan: &Plan, s: &Stream, chunk_elems: usize) -> Range<usize> {
        let seg = plan.seg_of(s, self.step);
        let start = seg.start + self.chunk * chunk_elems;
        start..(start + chunk_elems).min(seg.end)
    }

    pub fn advance(&mut self, plan: &Plan, s: &Stream, chunk_elems: usize) {
        self.chunk += 1;
        self.skip_empty(plan, s, chunk_elems);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: usize, r: usize, total: usize) -> Plan {
        Plan {
            next: (r + 1) % n,
            prev: (r + n - 1) % n,
            segs: Segments { total, parts: n },
            out: Stream {
                first: (r + n - 1) % n,
                steps: 2 * (n - 1),
            },
            inp: Stream {
                first: (r + n - 2) % n,
                steps: 2 * (n - 1),
            },
            out_initial_step: true,
            reduce_steps: n - 1,
            op: ReduceOp::Sum,
            step_base: 0,
        }
    }

    #[test]
    fn segments_cover_the_buffer_once_and_blocks_exactly() {
        let s = Segments {
            total: 10,
            parts: 4,
        };
        let all: alloc::vec::Vec<_> = (0..4).flat_map(|k| s.range(k)).collect();
        assert_eq!(all, (0..10).collect::<alloc::vec::Vec<_>>());
        let b = Segments {
            total: 5 * 3,
            parts: 3,
        };
        assert_eq!(b.range(1), 5..10);
    }

    #[test]
    fn the_ring_forwards_what_came_in_and_ends_with_each_segment_reduced_once() {
        // Outbound step t+1 is inbound step t; after the reduce steps, rank r holds the
        // full reduction of segment r, and every segment is received once in each phase.
        for n in 2..9 {
            for r in 0..n {
                let p = ring(n, r, 100);
                for t in 0..p.inp.steps - 1 {
                    assert_eq!(p.seg_of(&p.out, t + 1), p.seg_of(&p.inp, t));
                }
                assert_eq!(p.seg_of(&p.inp, n - 2), p.segs.range(r));
                let mut seen = alloc::vec![0; n];
                for t in n - 1..2 * (n - 1) {
                    let s = p.seg_of(&p.inp, t);
                    seen[(0..n).position(|k| p.segs.range(k) == s).unwrap()] += 1;
                }
                // Every segment but the one this rank reduced arrives in the gather.
                assert_eq!(seen.iter().sum::<usize>(), n - 1);
                assert_eq!(seen[r], 0);
            }
        }
    }

    #[test]
    fn a_cursor_visits_every_chunk_and_skips_empty_segments() {
        let p = ring(4, 0, 3); // one segment is empty
        let ce = 2;
        let mut c = Cursor::start(&p, &p.out, ce);
        let mut n = 0;
        while c.step < p.out.steps {
            assert!(!c.range(&p, &p.out, ce).is_empty());
            c.advance(&p, &p.out, ce);
            n += 1;
        }
        assert_eq!(n, p.chunks(&p.out, ce));
    }
}
