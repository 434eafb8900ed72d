//! One contiguous buffer for all of a model's dense parameters (and one for their
//! gradients).
//!
//! [`FlatParams::adopt`] copies every variable of a `VarStore` into a slice of one
//! flat `f32` tensor and re-points the variable at that slice with `set_data`, so
//! the model keeps working unchanged while forward, backward and optimizer steps
//! all land in the flat buffer. The gradients are re-pointed the same way: autograd
//! accumulates in place into an existing gradient, so after [`FlatParams::zero_grad`]
//! and `backward()` the whole gradient is [`FlatParams::grad`].
//! [`FlatParams::adopt_shared`] points a second model's variables at an existing
//! buffer instead: Hogwild workers of one replica, each with its own gradient.

use crate::hogwild::{with_borrowed, with_shared, ParamAlias};
use crate::{Error, Result};
use tch::{nn::VarStore, Kind, Tensor};

/// All trainable dense parameters of a model in one contiguous buffer.
#[derive(Debug)]
pub struct FlatParams {
    values: Tensor,
    grad: Tensor,
    vars: Vec<(String, Tensor)>,
    /// For a Hogwild worker, the alias keeping the shared buffer alive.
    _shared: Option<ParamAlias>,
}

impl ParamAlias {
    /// An alias of `params`' flat buffer.
    ///
    /// # Errors
    ///
    /// A buffer that is not on the CPU.
    #[allow(unsafe_code)]
    pub fn new(params: &FlatParams) -> Result<Self> {
        // SAFETY: a `FlatParams` never resizes nor reallocates its buffer: it
        // is allocated once, its variables are views of it.
        unsafe { ParamAlias::over(params.values().shallow_clone()) }
    }
}

/// The trainable variables of `vs`, in name order; all must be f32.
fn trainable(vs: &VarStore) -> Result<Vec<(String, Tensor)>> {
    let mut vars: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some((name, t)) = vars.iter().find(|(_, t)| t.kind() != Kind::Float) {
        return Err(Error::Layout(format!(
            "variable {name} is {:?}; dense parameters must be f32",
            t.kind()
        )));
    }
    Ok(vars)
}

impl FlatParams {
    /// Moves the trainable variables of `vs` into one flat buffer (in name order,
    /// so two replicas built the same way share one layout).
    ///
    /// # Errors
    ///
    /// Variables that are not `f32`, or a buffer libtorch cannot allocate.
    pub fn adopt(vs: &VarStore) -> Result<Self> {
        let vars = trainable(vs)?;
        let numel: i64 = vars.iter().map(|(_, t)| t.numel() as i64).sum();
        let values = Tensor::f_zeros([numel], (Kind::Float, vs.device()))?;
        Self::point_into(vars, values, true, None)
    }

    /// Points the trainable variables of `vs` at `owner`'s buffer instead of a
    /// buffer of their own: a Hogwild worker of the same replica. The variables
    /// take the owner's current values; each worker keeps its own gradient (and
    /// its own autograd bookkeeping), and its optimizer steps land in the shared
    /// buffer. `vs` must have the owner's layout.
    ///
    /// # Errors
    ///
    /// Variables whose names or shapes differ from the owner's layout
    /// ([`Error::Layout`]), or that are not `f32`.
    pub fn adopt_shared(vs: &VarStore, owner: &FlatParams) -> Result<Self> {
        let vars = trainable(vs)?;
        let layout: Vec<(String, Vec<i64>)> =
            vars.iter().map(|(n, t)| (n.clone(), t.size())).collect();
        if layout != owner.layout() {
            return Err(Error::Layout(
                "a Hogwild worker's variables differ from its replica's (names or shapes)".into(),
            ));
        }
        let alias = ParamAlias::new(owner)?;
        let values = alias.tensor().shallow_clone();
        Self::point_into(vars, values, false, Some(alias))
    }

    /// Re-points `vars` into slices of `values` (copying their values in if
    /// `copy`) and their gradients into a fresh flat gradient.
    fn point_into(
        mut vars: Vec<(String, Tensor)>,
        values: Tensor,
        copy: bool,
        shared: Option<ParamAlias>,
    ) -> Result<Self> {
        let mut grad = Tensor::f_zeros([values.numel() as i64], (Kind::Float, values.device()))?;
        let mut offset = 0;
        for (_, var) in vars.iter_mut() {
            let n = var.numel() as i64;
            let shape = var.size();
            let mut slot = values.f_narrow(0, offset, n)?.f_view(shape.as_slice())?;
            if copy {
                tch::no_grad(|| slot.f_copy_(var)).map(drop)?;
            }
            var.f_set_data(&slot)?;
            // Give the variable a gradient, then re-point it into the flat gradient.
            (var.f_sum(Kind::Float)? * 0.0).f_backward()?;
            let mut var_grad = var.grad();
            var_grad.f_set_data(&grad.f_narrow(0, offset, n)?.f_view(shape.as_slice())?)?;
            offset += n;
        }
        tch::no_grad(|| grad.f_zero_()).map(drop)?;
        Ok(Self {
            values,
            grad,
            vars,
            _shared: shared,
        })
    }

    /// True when `self` and `other` step the same parameter memory (one is a
    /// Hogwild worker of the other, or both of a third).
    pub fn shares_values_with(&self, other: &FlatParams) -> bool {
        self.values.data_ptr() == other.values.data_ptr()
    }

    /// The flat parameter buffer (1-D, f32). Writes to it change the model.
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The flat gradient buffer (1-D, f32), filled by `backward()`.
    pub fn grad(&self) -> &Tensor {
        &self.grad
    }

    /// Number of scalar parameters.
    pub fn numel(&self) -> usize {
        self.values.numel()
    }

    /// Names and shapes of the variables, in buffer order.
    pub fn layout(&self) -> Vec<(String, Vec<i64>)> {
        self.vars
            .iter()
            .map(|(n, t)| (n.clone(), t.size()))
            .collect()
    }

    /// Overwrites the gradient with `src` (length [`FlatParams::numel`]).
    ///
    /// # Errors
    ///
    /// `src` or `out` of another length than [`FlatParams::numel`]
    /// ([`Error::Layout`]).
    pub fn load_grad_from(&self, src: &[f32]) -> Result<()> {
        self.write(&self.grad, src)
    }

    /// Copies `buffer` (the values or the gradient) out into `out`, and
    /// tells whether every value is finite (in the same pass).
    fn read_finite(&self, buffer: &Tensor, out: &mut [f32]) -> Result<bool> {
        self.check_len(out.len())?;
        with_shared(buffer, |values| values.read_finite_into(out))
    }

    /// Overwrites `buffer` (the values or the gradient) with `src`.
    fn write(&self, buffer: &Tensor, src: &[f32]) -> Result<()> {
        self.check_len(src.len())?;
        with_borrowed(src, |src| {
            Ok(tch::no_grad(|| buffer.shallow_clone().f_copy_(src))?)
        })?;
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len == self.numel() {
            Ok(())
        } else {
            Err(Error::Layout(format!(
                "buffer has {len} values, parameters have {}",
                self.numel()
            )))
        }
    }

    /// Zeroes the gradient buffer (before a backward pass).
    ///
    /// # Errors
    ///
    /// libtorch's, on a buffer it cannot write.
    pub fn zero_grad(&self) -> Result<()> {
        tch::no_grad(|| self.grad.shallow_clone().f_zero_()).map(drop)?;
        Ok(())
    }

    /// Copies the parameters out into `out` (length [`FlatParams::numel`]).
    ///
    /// # Errors
    ///
    /// `src` or `out` of another length than [`FlatParams::numel`]
    /// ([`Error::Layout`]).
    pub fn copy_to(&self, out: &mut [f32]) -> Result<()> {
        self.read_finite(&self.values, out).map(drop)
    }

    /// Copies the parameters out into `out` (length [`FlatParams::numel`])
    /// and tells whether they are all finite, checked in the same pass.
    ///
    /// # Errors
    ///
    /// `src` or `out` of another length than [`FlatParams::numel`]
    /// ([`Error::Layout`]).
    pub fn copy_finite_to(&self, out: &mut [f32]) -> Result<bool> {
        self.read_finite(&self.values, out)
    }

    /// [`FlatParams::copy_finite_to`] of the gradient.
    ///
    /// # Errors
    ///
    /// `src` or `out` of another length than [`FlatParams::numel`]
    /// ([`Error::Layout`]).
    pub fn copy_finite_grad_to(&self, out: &mut [f32]) -> Result<bool> {
        self.read_finite(&self.grad, out)
    }

    /// Overwrites the parameters with `src` (length [`FlatParams::numel`]).
    ///
    /// # Errors
    ///
    /// `src` or `out` of another length than [`FlatParams::numel`]
    /// ([`Error::Layout`]).
    pub fn load_from(&self, src: &[f32]) -> Result<()> {
        self.write(&self.values, src)
    }

    /// Whether every parameter is finite (no NaN, no ±Inf).
    ///
    /// One pass that reads each value once: a sync loop may be writing the
    /// buffer meanwhile, and libtorch's `isfinite` reads it twice (`w == w`),
    /// so a value changing between the reads looked like a NaN. The sum in
    /// `f64` is finite exactly when every value is: a NaN or an infinity
    /// carries through it, and no count of finite `f32`s can overflow it.
    ///
    /// # Errors
    ///
    /// A buffer that is not on the CPU ([`Error::Layout`]).
    pub fn all_finite(&self) -> Result<bool> {
        let sum = self.values.f_sum(Kind::Double)?;
        Ok(sum.f_double_value(&[])?.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, nn::Module, Device};

    fn two_layer() -> (VarStore, nn::Sequential) {
        tch::manual_seed(7);
        let vs = VarStore::new(Device::Cpu);
        let root = vs.root();
        let net = nn::seq()
            .add(nn::linear(&root / "a", 3, 5, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(&root / "b", 5, 2, Default::default()));
        (vs, net)
    }

    #[test]
    fn adopted_model_computes_the_same_and_grads_land_in_the_flat_buffer() {
        let (vs, net) = two_layer();
        let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 1.0, 0.0, -0.5]).view([2, 3]);
        let before = net.forward(&x);
        let params = FlatParams::adopt(&vs).unwrap();
        assert_eq!(params.numel(), 3 * 5 + 5 + 5 * 2 + 2);
        let after = net.forward(&x);
        assert!(before.allclose(&after, 0.0, 0.0, false));

        for _ in 0..2 {
            params.zero_grad().unwrap();
            net.forward(&x).square().sum(Kind::Float).backward();
        }
        // Independent computation: the per-variable gradients, concatenated.
        let mut named = vs.variables().into_iter().collect::<Vec<_>>();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let expected = Tensor::cat(
            &named
                .iter()
                .map(|(_, t)| t.grad().view(-1))
                .collect::<Vec<_>>(),
            0,
        );
        assert!(params.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
        assert!(params.grad().allclose(&expected, 0.0, 0.0, false));

        // A write to the flat buffer changes the model.
        let _ = tch::no_grad(|| params.values().shallow_clone().fill_(0.0));
        assert_eq!(
            net.forward(&x).abs().sum(Kind::Float).double_value(&[]),
            0.0
        );
    }

    #[test]
    fn all_finite_spots_nan_and_infinities_even_while_another_thread_writes() {
        let (vs, _) = two_layer();
        let params = FlatParams::adopt(&vs).unwrap();
        assert!(params.all_finite().unwrap());
        let mut values = vec![0f32; params.numel()];
        params.copy_to(&mut values).unwrap();
        let mut copy = vec![0f32; params.numel()];
        assert!(params.copy_finite_to(&mut copy).unwrap());
        assert_eq!(copy, values);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut poisoned = values.clone();
            poisoned[3] = bad;
            params.load_from(&poisoned).unwrap();
            assert!(!params.all_finite().unwrap(), "{bad}");
            assert!(!params.copy_finite_to(&mut copy).unwrap(), "{bad}");
            params.load_grad_from(&poisoned).unwrap();
            assert!(!params.copy_finite_grad_to(&mut copy).unwrap(), "{bad}");
            assert_eq!(copy[3].to_bits(), bad.to_bits());
        }
        assert!(params.copy_finite_to(&mut [0.0]).is_err());
        values[0] = f32::MAX;
        params.load_from(&values).unwrap();
        assert!(params.all_finite().unwrap());
        // A sync loop writing the buffer never makes finite values look NaN.
        values[0] = 0.0;
        params.load_from(&values).unwrap();
        let writer = crate::ParamAlias::new(&params).unwrap();
        let stop = &std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut delta = vec![1e-3f32; writer.len()];
                let zeros = vec![0f32; writer.len()];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    delta.iter_mut().for_each(|d| *d = -*d);
                    let target = delta.clone();
                    writer
                        .write_back(crate::hogwild::WriteBack::Delta, &target, &zeros)
                        .unwrap();
                }
            });
            let checks = (0..5000).filter(|_| params.all_finite().unwrap()).count();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(checks, 5000);
        });
    }

    #[test]
    fn copy_and_load_round_trip_and_reject_wrong_lengths() {
        let (vs, _) = two_layer();
        let params = FlatParams::adopt(&vs).unwrap();
        let mut snap = vec![0f32; params.numel()];
        params.copy_to(&mut snap).unwrap();
        let doubled: Vec<f32> = snap.iter().map(|v| v * 2.0).collect();
        params.load_from(&doubled).unwrap();
        let mut back = vec![0f32; params.numel()];
        params.copy_to(&mut back).unwrap();
        assert_eq!(back, doubled);
        assert!(params.copy_to(&mut [0.0; 3]).is_err());
        assert!(params.load_from(&[0.0; 3]).is_err());
    }
}
