//! Hogwild access to a replica's dense parameters from another thread.
//!
//! A [`ParamAlias`] lets a sync thread read and write a trainer's flat parameter
//! buffer while the trainer keeps stepping, as ShadowSync's background loop does.
//! It is a second tensor over the same memory made with `from_blob`: its own
//! tensor object with its own autograd version counter, so in-place writes through
//! it never trip the trainer's autograd check ("modified by an inplace operation"),
//! as a `shallow_clone` would. Reads may see a half-updated replica and concurrent
//! updates may overwrite each other: Hogwild semantics, by design (docs/design.md §2).
//!
//! [`with_shared`] hands a tensor's memory to plain Rust loops (the one-pass
//! optimizers, the sync threads' snapshots and write-backs) as
//! [`SharedValues`], whose accesses are relaxed atomics: Hogwild without a
//! data race in Rust.
//!
//! This is the runtime's only module with `unsafe` code (the workspace denies
//! it elsewhere): making tensors over raw memory and views over tensors is
//! what lets the sync threads and the one-pass optimizers touch parameters
//! without copies. Every function it exports is safe.

#![allow(unsafe_code)]

mod memory;

pub(crate) use memory::with_borrowed;
pub use memory::{with_shared, SharedValues};

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

/// How a target is written into a replica that kept training during the round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteBack {
    /// `w = target`.
    Overwrite,
    /// `w += target − snapshot`.
    #[default]
    Delta,
}

impl WriteBack {
    /// Applies `target` (computed from `snapshot`) to `replica` (as many
    /// values as the shortest holds).
    pub fn apply(self, replica: SharedValues<'_>, target: &[f32], snapshot: &[f32]) {
        match self {
            WriteBack::Overwrite => replica.write_from(target),
            WriteBack::Delta => replica.update_chunks(|span, w| {
                let (target, snapshot) = (tail(target, &span), tail(snapshot, &span));
                for ((w, t), s) in w.iter_mut().zip(target).zip(snapshot) {
                    *w += t - s;
                }
            }),
        }
    }
}

/// The values of `values` from `span`'s start, up to its length.
fn tail<'v>(values: &'v [f32], span: &std::ops::Range<usize>) -> &'v [f32] {
    let end = span.end.min(values.len());
    &values[span.start.min(end)..end]
}

/// Another thread's handle on a replica's flat parameter buffer.
#[derive(Debug)]
pub struct ParamAlias {
    alias: Tensor,
    // Declared after `alias` so it is dropped after it: keeps the memory alive.
    _owner: Tensor,
}

impl ParamAlias {
    /// An alias of `owner`'s memory, which must be a 1-D f32 CPU tensor (an
    /// error names what it is otherwise).
    ///
    /// # Safety
    ///
    /// Nothing may resize or reallocate `owner`'s storage while the alias
    /// lives (through `owner` or any tensor sharing its implementation):
    /// the alias points at the memory as it is now. `FlatParams` keeps this
    /// promise ([`ParamAlias::new`]).
    pub(crate) unsafe fn over(owner: Tensor) -> Result<Self> {
        let len = memory::plain_len(&owner)?;
        if owner.dim() != 1 {
            return Err(Error::Layout(format!(
                "an alias of a tensor of shape {:?}: only flat buffers",
                owner.size()
            )));
        }
        // SAFETY: `owner` is a 1-D, contiguous f32 CPU tensor of `len` elements
        // (checked above), so `data_ptr` points at `len` initialized f32s. The
        // memory stays valid as long as `owner` lives, and `owner` lives as long
        // as `alias` (same struct, dropped after it); nothing reallocates it
        // meanwhile (the caller's promise). Concurrent access from the trainer's
        // thread is a data race on f32 values only (Hogwild), never on tensor
        // metadata.
        let alias = unsafe {
            Tensor::f_from_blob(
                owner.data_ptr() as *const u8,
                &[len as i64],
                &[],
                Kind::Float,
                Device::Cpu,
            )?
        };
        Ok(Self {
            alias,
            _owner: owner,
        })
    }

    /// The alias tensor itself (for a Hogwild worker's own view of the buffer).
    pub(crate) fn tensor(&self) -> &Tensor {
        &self.alias
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.alias.numel()
    }

    /// True when the replica has no parameters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the replica's current values into `out` and tells whether they
    /// are all finite (checked in the same pass).
    ///
    /// # Errors
    ///
    /// An `out` of another length than the replica ([`Error::Layout`]).
    pub fn snapshot_into(&self, out: &mut [f32]) -> Result<bool> {
        if out.len() != self.len() {
            return Err(Error::Layout(format!(
                "a snapshot of a replica of {} values into {}",
                self.len(),
                out.len()
            )));
        }
        with_shared(&self.alias, |replica| replica.read_finite_into(out))
    }

    /// Writes `target`, computed from `snapshot`, into the replica in one pass:
    /// [`WriteBack::Overwrite`] copies it, [`WriteBack::Delta`] adds
    /// `target − snapshot` (what the round moved, kept on top of the steps the
    /// trainer took meanwhile).
    ///
    /// # Errors
    ///
    /// A `target` of another length than the replica ([`Error::Layout`]).
    pub fn write_back(&self, mode: WriteBack, target: &[f32], snapshot: &[f32]) -> Result<()> {
        if target.len() != self.len() {
            return Err(Error::Layout(format!(
                "write-back of {} values into a replica of {}",
                target.len(),
                self.len()
            )));
        }
        self.write_back_blocks(mode, snapshot, |write| write(0, target))
    }

    /// Writes a target, computed from `snapshot`, into the replica block by
    /// block as `blocks` hands them over (`blocks(write)` calls
    /// `write(offset, block)`), each applied as in [`ParamAlias::write_back`]
    /// while it is still in cache: a round need not assemble its whole
    /// target first. An error for a block outside the replica.
    ///
    /// # Errors
    ///
    /// A block outside the replica or a `snapshot` of another length ([`Error::Layout`]),
    /// or an error of `blocks`.
    pub fn write_back_blocks(
        &self,
        mode: WriteBack,
        snapshot: &[f32],
        blocks: impl FnOnce(&mut dyn FnMut(usize, &[f32]) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        let len = self.len();
        if snapshot.len() != len {
            return Err(Error::Layout(format!(
                "write-back from a snapshot of {} values into a replica of {len}",
                snapshot.len()
            )));
        }
        with_shared(&self.alias, |replica| {
            blocks(&mut |offset, target| {
                let span = offset..offset.saturating_add(target.len());
                match snapshot.get(span.clone()) {
                    Some(snapshot) if span.end <= len => {
                        mode.apply(replica.slice(span), target, snapshot);
                        Ok(())
                    }
                    _ => Err(Error::Layout(format!(
                        "write-back of values {span:?} into a replica of {len}"
                    ))),
                }
            })
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FlatParams;
    use tch::nn;

    #[test]
    fn a_background_thread_syncs_while_the_trainer_keeps_stepping() {
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = nn::linear(vs.root() / "fc", 8, 4, Default::default());
        let params = FlatParams::adopt(&vs).unwrap();
        let alias = ParamAlias::new(&params).unwrap();
        let zeros = vec![0f32; alias.len()];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let background = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut snapshot = vec![0f32; alias.len()];
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    alias.snapshot_into(&mut snapshot).unwrap();
                    let target: Vec<f32> = snapshot.iter().map(|v| 0.5 * v).collect();
                    alias
                        .write_back(WriteBack::Delta, &target, &snapshot)
                        .unwrap();
                    rounds += 1;
                }
                (alias, rounds)
            })
        };
        let x = Tensor::ones([16, 8], (Kind::Float, Device::Cpu));
        for _ in 0..300 {
            params.zero_grad().unwrap();
            // Would fail if the background writes bumped the trainer's version counter.
            tch::nn::Module::forward(&layer, &x)
                .square()
                .sum(Kind::Float)
                .backward();
            let _ = tch::no_grad(|| {
                params
                    .values()
                    .shallow_clone()
                    .f_sub_(&(params.grad() * 0.01))
            });
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (alias, rounds) = background.join().unwrap();
        assert!(rounds > 0);
        // Writes through the alias land in the trainer's buffer.
        alias
            .write_back(WriteBack::Overwrite, &zeros, &zeros)
            .unwrap();
        assert_eq!(
            params.values().abs().sum(Kind::Float).double_value(&[]),
            0.0
        );
    }

    #[test]
    fn write_back_overwrites_or_adds_the_delta_and_checks_lengths() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = vs.root().zeros("w", &[3]);
        let params = FlatParams::adopt(&vs).unwrap();
        params.load_from(&[1.0, 2.0, 3.0]).unwrap();
        let alias = ParamAlias::new(&params).unwrap();
        let snapshot = [0.5, 2.0, 1.0];
        // Delta: w += target − snapshot.
        let target = vec![1.5, 0.0, 1.0];
        alias
            .write_back(WriteBack::Delta, &target, &snapshot)
            .unwrap();
        let mut now = [0f32; 3];
        alias.snapshot_into(&mut now).unwrap();
        assert_eq!(now, [2.0, 0.0, 3.0]);
        alias
            .write_back(WriteBack::Overwrite, &[7.0, 8.0, 9.0], &snapshot)
            .unwrap();
        alias.snapshot_into(&mut now).unwrap();
        assert_eq!(now, [7.0, 8.0, 9.0]);
        let e = alias
            .write_back(WriteBack::Overwrite, &[1.0], &snapshot)
            .unwrap_err();
        assert!(e.to_string().contains("1 values"), "{e}");
        let e = alias
            .write_back(WriteBack::Overwrite, &now, &snapshot[..2])
            .unwrap_err();
        assert!(e.to_string().contains("snapshot of 2"), "{e}");
    }

    #[test]
    fn block_write_back_applies_each_block_at_its_offset_and_refuses_strays() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = vs.root().zeros("w", &[5]);
        let params = FlatParams::adopt(&vs).unwrap();
        params.load_from(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let alias = ParamAlias::new(&params).unwrap();
        let snapshot = [1.0, 1.0, 1.0, 1.0, 1.0];
        // The same as one whole write-back of the blocks laid side by side.
        alias
            .write_back_blocks(WriteBack::Delta, &snapshot, |write| {
                write(3, &[2.0, 0.0])?;
                write(0, &[1.0, 3.0, 1.0])
            })
            .unwrap();
        let mut now = [0f32; 5];
        alias.snapshot_into(&mut now).unwrap();
        assert_eq!(now, [1.0, 4.0, 3.0, 5.0, 4.0]);
        let e = alias
            .write_back_blocks(WriteBack::Overwrite, &snapshot, |write| write(4, &[0.0; 2]))
            .unwrap_err();
        assert!(e.to_string().contains("4..6"), "{e}");
    }
}
