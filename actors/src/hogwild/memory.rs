//! A tensor's memory seen from Rust while other threads read and write it
//! (Hogwild), and a Rust slice's memory as a tensor for libtorch to read.
//!
//! [`with_shared`] hands a tensor's values to Rust code as [`SharedValues`]:
//! a view whose every access is a relaxed atomic load or store of one whole
//! `f32`. No `&[f32]` or `&mut [f32]` is ever made over memory that another
//! thread may write, so however the threads interleave, Rust code has no data
//! race: a load returns the old value or the new one, and of two concurrent
//! updates one may be lost (Hogwild's race on numbers, by design). Relaxed
//! loads and stores compile to the plain moves on x86-64 and AArch64. Loops the
//! compiler should vectorize (the optimizers' arithmetic) run on a private
//! copy of each small chunk ([`SharedValues::update_chunks`]).
//!
//! libtorch's kernels read and write the same memory from C++ (a forward
//! pass, a `copy_`): those accesses are libtorch's, outside Rust's model.

#![allow(unsafe_code)]

use crate::recovery::all_finite;
use crate::{Error, Result};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use tch::{Device, Kind, Tensor};

/// `f32` values that other threads may read and write at the same time:
/// each access is a relaxed atomic load or store of a whole value.
#[derive(Clone, Copy)]
pub struct SharedValues<'a> {
    cells: &'a [AtomicU32],
}

impl std::fmt::Debug for SharedValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedValues")
            .field("len", &self.len())
            .finish()
    }
}

impl<'a> SharedValues<'a> {
    /// Values copied out, updated and stored back at a time by
    /// [`SharedValues::update_chunks`]: small, so that another thread's write
    /// between a chunk's load and its store is rarely lost (a few hundred
    /// nanoseconds), and large enough for the update to vectorize.
    pub const CHUNK: usize = 256;

    /// A view of `values`, memory of this thread's own (borrowed mutably, so
    /// no other reference to it lives meanwhile); the view may be shared with
    /// other threads while it lives.
    pub fn of(values: &'a mut [f32]) -> Self {
        // SAFETY: `AtomicU32` has the size and alignment of `f32`, and the
        // exclusive borrow of `values` means no other access to the memory
        // but through the view while it lives.
        let cells = unsafe {
            std::slice::from_raw_parts(values.as_mut_ptr().cast::<AtomicU32>(), values.len())
        };
        Self { cells }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The value at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<f32> {
        self.cells
            .get(index)
            .map(|c| f32::from_bits(c.load(Relaxed)))
    }

    /// Sets the value at `index`; false (nothing written) past the end.
    pub fn set(&self, index: usize, value: f32) -> bool {
        self.cells
            .get(index)
            .map(|c| c.store(value.to_bits(), Relaxed))
            .is_some()
    }

    /// The values of `range`, clamped to the view.
    pub fn slice(&self, range: Range<usize>) -> SharedValues<'a> {
        let end = range.end.min(self.len());
        Self {
            cells: &self.cells[range.start.min(end)..end],
        }
    }

    /// The values in views of `size` (at least 1) values, the last shorter.
    pub fn chunks(&self, size: usize) -> impl Iterator<Item = SharedValues<'a>> + 'a {
        self.cells.chunks(size.max(1)).map(|cells| Self { cells })
    }

    /// The values, each loaded once.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = f32> + 'a {
        self.cells.iter().map(|c| f32::from_bits(c.load(Relaxed)))
    }

    /// Asks the processor to bring the values into cache ahead of their use
    /// (a no-op where no such hint is known). A hint, not an access: no thread
    /// reads anything different for it.
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        for line in self.cells.chunks(16) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch neither reads nor writes memory as the program
            // sees it and never faults; the address is one of the view's.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }

    /// Copies the first values into `out` (as many as the shorter holds).
    pub fn read_into(&self, out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(self.cells) {
            *o = f32::from_bits(c.load(Relaxed));
        }
    }

    /// Stores `values` over the first values (as many as the shorter holds).
    pub fn write_from(&self, values: &[f32]) {
        for (c, v) in self.cells.iter().zip(values) {
            c.store(v.to_bits(), Relaxed);
        }
    }

    /// Copies the first values into `out` (as many as the shorter holds) and
    /// tells whether every value copied is finite, checked chunk by chunk
    /// while it is still in cache.
    pub fn read_finite_into(&self, out: &mut [f32]) -> bool {
        const BLOCK: usize = 16 * 1024;
        let blocks = self.cells.chunks(BLOCK).zip(out.chunks_mut(BLOCK));
        blocks.fold(true, |finite, (cells, out)| {
            let len = cells.len().min(out.len());
            let out = &mut out[..len];
            Self { cells }.read_into(out);
            finite & all_finite(out)
        })
    }

    /// Runs `update(span, values)` on a private copy of each chunk of up to
    /// [`SharedValues::CHUNK`] values (`span`: where it lies in the view),
    /// storing the chunk back after each call.
    pub fn update_chunks(&self, mut update: impl FnMut(Range<usize>, &mut [f32])) {
        let mut chunk = [0f32; Self::CHUNK];
        for (i, cells) in self.cells.chunks(Self::CHUNK).enumerate() {
            let view = Self { cells };
            let chunk = &mut chunk[..cells.len()];
            view.read_into(chunk);
            let start = i * Self::CHUNK;
            update(start..start + cells.len(), chunk);
            view.write_from(chunk);
        }
    }
}

/// Runs `f` on a tensor over `values`' memory, without copying it. `f` may read
/// the tensor but must neither write it nor keep it (or a view of it) past its
/// return.
pub(crate) fn with_borrowed<R>(values: &[f32], f: impl FnOnce(&Tensor) -> Result<R>) -> Result<R> {
    // SAFETY: `values` is `values.len()` initialized f32s that stay borrowed, so
    // valid and unchanged, until this function returns; the tensor is dropped
    // before that, and callers only read through it (the contract above).
    let tensor = unsafe {
        Tensor::f_from_blob(
            values.as_ptr() as *const u8,
            &[values.len() as i64],
            &[],
            Kind::Float,
            Device::Cpu,
        )?
    };
    f(&tensor)
}

/// The number of `f32`s in `tensor` if it is a contiguous CPU tensor of
/// `f32`s, else an error naming what it is.
pub(super) fn plain_len(tensor: &Tensor) -> Result<usize> {
    if tensor.kind() != Kind::Float || tensor.device() != Device::Cpu || !tensor.is_contiguous() {
        return Err(Error::Layout(format!(
            "shared values over a {:?} tensor on {:?} (contiguous: {}): only contiguous CPU \
             tensors of f32",
            tensor.kind(),
            tensor.device(),
            tensor.is_contiguous()
        )));
    }
    Ok(tensor.numel())
}

/// Runs `f` on the values of `tensor`, a contiguous CPU tensor of `f32`s, as
/// [`SharedValues`] (no copy): other threads may read and write them
/// meanwhile (Hogwild), and writes land in every handle on the memory.
///
/// The tensor's storage must stay where it is while `f` runs: nothing may
/// resize it (the buffers of [`FlatParams`](crate::FlatParams) and the
/// embedding tables never are).
///
/// # Errors
///
/// A tensor that is not contiguous, on the CPU and of `f32`s.
pub fn with_shared<R>(tensor: &Tensor, f: impl FnOnce(SharedValues<'_>) -> R) -> Result<R> {
    let len = plain_len(tensor)?;
    if len == 0 {
        return Ok(f(SharedValues { cells: &[] }));
    }
    // SAFETY: `tensor` is contiguous, on the CPU and of `f32`s (checked
    // above), so `data_ptr` points at `len` initialized f32s, aligned as
    // `AtomicU32` (same size and alignment), valid while `tensor` is borrowed,
    // which outlives `f`. Rust code reaches the memory only through such
    // views, whose accesses are all atomic: no data race in Rust.
    let cells = unsafe { std::slice::from_raw_parts(tensor.data_ptr() as *const AtomicU32, len) };
    Ok(f(SharedValues { cells }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_values_write_through_and_refuse_other_kinds_and_layouts() {
        let t = Tensor::from_slice(&[1f32, 2.0, 3.0]);
        with_shared(&t, |v| assert!(v.set(1, 5.0) && !v.set(3, 0.0))).unwrap();
        assert_eq!(
            with_shared(&t, |v| v.iter().collect::<Vec<_>>()).unwrap(),
            [1.0, 5.0, 3.0]
        );
        assert!(with_shared(&Tensor::from_slice(&[1i64]), |_| ()).is_err());
        let strided = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0]).view([2, 2]).tr();
        let e = with_shared(&strided, |_| ()).unwrap_err();
        assert!(e.to_string().contains("contiguous: false"), "{e}");
        let empty = Tensor::from_slice::<f32>(&[]);
        assert_eq!(with_shared(&empty, |v| v.len()).unwrap(), 0);
    }

    #[test]
    fn chunks_are_updated_in_place_with_their_spans() {
        let mut values: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let shared = SharedValues::of(&mut values);
        let mut spans = Vec::new();
        shared.update_chunks(|span, chunk| {
            assert_eq!(chunk.len(), span.len());
            chunk.iter_mut().for_each(|v| *v *= 2.0);
            spans.push(span);
        });
        assert_eq!(spans, [0..256, 256..512, 512..768, 768..1000]);
        assert_eq!(
            shared.slice(998..2000).iter().collect::<Vec<_>>(),
            [1996.0, 1998.0]
        );
        assert!(shared.slice(2000..3000).is_empty());
        let mut out = vec![0f32; 1000];
        assert!(shared.read_finite_into(&mut out));
        shared.set(500, f32::NAN);
        assert!(!shared.read_finite_into(&mut out));
        assert_eq!(values[999], 1998.0);
    }

    /// Two threads writing and one reading the same values at once. Run
    /// under Miri (`rustup component add miri --toolchain nightly`, then
    /// `cargo +nightly miri test -p shadowsync-actors --lib
    /// hogwild::memory::tests::concurrent`), its race detector fails this
    /// test if an access is ever made plain (tried: a plain read in `iter`
    /// is reported as a data race).
    #[test]
    fn concurrent_reads_and_writes_see_whole_values() {
        let mut values = vec![0f32; 64];
        let shared = SharedValues::of(&mut values);
        std::thread::scope(|s| {
            for sign in [1.0f32, -1.0] {
                s.spawn(move || {
                    for round in 0..20 {
                        shared.update_chunks(|_, chunk| chunk.fill(sign * round as f32));
                    }
                });
            }
            s.spawn(move || {
                for _ in 0..20 {
                    // Every value is one that some write stored, never torn.
                    assert!(shared.iter().all(|v| v.fract() == 0.0 && v.abs() < 20.0));
                }
            });
        });
        assert!(values.iter().all(|v| v.abs() < 20.0));
    }
}
