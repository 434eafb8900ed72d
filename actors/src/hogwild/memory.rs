//! A tensor's memory as a Rust slice, and a slice's memory as a tensor,
//! without copies: what the one-pass optimizers and the sync threads work
//! through, under the Hogwild contract of the module above.

#![allow(unsafe_code)]

use crate::{Error, Result};
use tch::kind::Element;
use tch::{Device, Kind, Tensor};

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

/// The number of `T`s in `tensor` if it is a contiguous CPU tensor of `T`s,
/// else an error naming what it is.
pub(super) fn plain_len<T: Element>(tensor: &Tensor) -> Result<usize> {
    if tensor.kind() != T::KIND || tensor.device() != Device::Cpu || !tensor.is_contiguous() {
        return Err(Error::Layout(format!(
            "a slice of {:?} over a {:?} tensor on {:?} (contiguous: {}): only contiguous CPU tensors of that kind",
            T::KIND,
            tensor.kind(),
            tensor.device(),
            tensor.is_contiguous()
        )));
    }
    Ok(tensor.numel())
}

/// Runs `f` on the values of `tensor`, a contiguous CPU tensor of `T`s, as a
/// slice (no copy). Another thread may be writing them meanwhile (Hogwild).
///
/// # Errors
///
/// A tensor that is not contiguous, on the CPU and of `T`s.
pub fn with_values<T: Element, R>(tensor: &Tensor, f: impl FnOnce(&[T]) -> R) -> Result<R> {
    let len = plain_len::<T>(tensor)?;
    if len == 0 {
        return Ok(f(&[]));
    }
    // SAFETY: `tensor` is contiguous, on the CPU and of `T`s (checked above), so
    // `data_ptr` points at `len` initialized `T`s, valid while `tensor` is
    // borrowed, which outlives `f`. Concurrent writers are Hogwild's data race
    // on plain values, never on the tensor's metadata.
    let values = unsafe { std::slice::from_raw_parts(tensor.data_ptr() as *const T, len) };
    Ok(f(values))
}

/// Runs `f` on the values of `tensor`, a contiguous CPU tensor of `T`s, as a
/// mutable slice (no copy): writes land in the tensor and in every handle on
/// its memory. Other threads may be reading or writing them meanwhile
/// (Hogwild).
///
/// # Errors
///
/// A tensor that is not contiguous, on the CPU and of `T`s.
///
/// # Safety
///
/// While `f` runs, the calling thread must hold no other slice of the
/// tensor's memory: none from [`with_values`] or from this function on the
/// same tensor or on another over the same memory (a `shallow_clone`, a view,
/// a [`ParamAlias`](super::ParamAlias)). A shared and a mutable slice of the same memory alive
/// at once in one thread is undefined behaviour. Other threads' concurrent
/// reads and writes of the values are Hogwild's races on plain numbers,
/// accepted by design (the module docs), never on the tensor's metadata.
pub unsafe fn with_values_mut<T: Element, R>(
    tensor: &Tensor,
    f: impl FnOnce(&mut [T]) -> R,
) -> Result<R> {
    let len = plain_len::<T>(tensor)?;
    if len == 0 {
        return Ok(f(&mut []));
    }
    // SAFETY: as in `with_values`; within this thread the slice is the only
    // access to the memory while `f` runs (the caller's promise above).
    let values = unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr() as *mut T, len) };
    Ok(f(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_slices_write_through_and_refuse_other_kinds_and_layouts() {
        let t = Tensor::from_slice(&[1f32, 2.0, 3.0]);
        // SAFETY: no other slice of `t` is held.
        unsafe { with_values_mut(&t, |v: &mut [f32]| v[1] = 5.0) }.unwrap();
        assert_eq!(
            with_values(&t, |v: &[f32]| v.to_vec()).unwrap(),
            [1.0, 5.0, 3.0]
        );
        assert!(with_values(&t, |_: &[i64]| ()).is_err());
        let strided = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0]).view([2, 2]).tr();
        let e = with_values(&strided, |_: &[f32]| ()).unwrap_err();
        assert!(e.to_string().contains("contiguous: false"), "{e}");
        let empty = Tensor::from_slice::<f32>(&[]);
        assert_eq!(with_values(&empty, |v: &[f32]| v.len()).unwrap(), 0);
    }
}
