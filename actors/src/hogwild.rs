//! Hogwild access to a replica's dense parameters from another thread.
//!
//! A [`ParamAlias`] lets a sync thread read and write a trainer's flat parameter
//! buffer while the trainer keeps stepping, as ShadowSync's background loop does.
//! It is a second tensor over the same memory made with `from_blob`: its own
//! tensor object with its own autograd version counter, so in-place writes through
//! it never trip the trainer's autograd check ("modified by an inplace operation"),
//! as a `shallow_clone` would. Reads may see a half-updated replica and concurrent
//! updates may overwrite each other: Hogwild semantics, by design (DESIGN.md §4).
//!
//! This is the only module of the project with `unsafe` code.

use crate::sync::WriteBack;
use crate::{FlatParams, Result};
use tch::{Device, Kind, Tensor};

/// Another thread's handle on a replica's flat parameter buffer.
#[derive(Debug)]
pub struct ParamAlias {
    alias: Tensor,
    // Declared after `alias` so it is dropped after it: keeps the memory alive.
    _owner: Tensor,
}

impl ParamAlias {
    /// An alias of `params`' flat buffer.
    pub fn new(params: &FlatParams) -> Result<Self> {
        let owner = params.values().shallow_clone();
        let len = owner.numel() as i64;
        // SAFETY: `owner` is a 1-D, contiguous f32 CPU tensor of `len` elements
        // (FlatParams guarantees it), so `data_ptr` points at `len` initialized f32s.
        // The memory stays valid as long as `owner` lives, and `owner` lives as long
        // as `alias` (same struct, dropped after it). Nothing resizes the buffer:
        // FlatParams never reallocates it. Concurrent access from the trainer's
        // thread is a data race on f32 values only (Hogwild), never on tensor
        // metadata.
        let alias = unsafe {
            Tensor::f_from_blob(
                owner.data_ptr() as *const u8,
                &[len],
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

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.alias.numel()
    }

    /// True when the replica has no parameters.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the replica's current values into `out`.
    pub fn snapshot_into(&self, out: &mut [f32]) -> Result<()> {
        self.alias.f_copy_data(out, out.len().min(self.len()))?;
        Ok(())
    }

    /// Writes `target`, computed from `snapshot`, into the replica.
    pub fn write_back(&self, mode: WriteBack, target: &[f32], snapshot: &[f32]) -> Result<()> {
        let mut alias = self.alias.shallow_clone();
        tch::no_grad(|| -> Result<()> {
            match mode {
                WriteBack::Overwrite => {
                    alias.f_copy_(&Tensor::f_from_slice(target)?)?;
                }
                WriteBack::Delta => {
                    let delta: Vec<f32> = target.iter().zip(snapshot).map(|(t, s)| t - s).collect();
                    let _ = alias.f_add_(&Tensor::f_from_slice(&delta)?)?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
