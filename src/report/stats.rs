//! The statistics of a report and of the claims: mean and standard deviation
//! over runs, and Welch's t-test of two sets of runs.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Mean and sample standard deviation (0 for one value, NaN for none).
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Welch's t-test of two samples' means, which need not share a variance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    /// The first sample's mean less the second's.
    pub difference: f64,
    /// The standard error of that difference.
    pub standard_error: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub degrees_of_freedom: f64,
}

impl Welch {
    /// The test of `a` against `b`; `None` with fewer than 2 values in either.
    pub fn new(a: &[f64], b: &[f64]) -> Option<Self> {
        if a.len() < 2 || b.len() < 2 {
            return None;
        }
        let ((mean_a, sd_a), (mean_b, sd_b)) = (mean_std(a), mean_std(b));
        let (va, vb) = (sd_a.powi(2) / a.len() as f64, sd_b.powi(2) / b.len() as f64);
        let degrees_of_freedom = (va + vb).powi(2)
            / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
        Some(Self {
            difference: mean_a - mean_b,
            standard_error: (va + vb).sqrt(),
            degrees_of_freedom,
        })
    }

    /// The one-sided p-value of "the difference is at most `bound`": the
    /// chance of a t at least this far above `bound` if it were. With no
    /// spread in either sample, the difference itself decides (0 or 1).
    pub fn p_above(&self, bound: f64) -> f64 {
        let t = (self.difference - bound) / self.standard_error;
        match StudentsT::new(0.0, 1.0, self.degrees_of_freedom.max(1.0)) {
            Ok(student) if self.standard_error > 0.0 => student.sf(t),
            _ if self.difference > bound => 0.0,
            _ => 1.0,
        }
    }

    /// The two-sided p-value that the means are equal; `None` with no spread
    /// in either sample.
    pub fn p_equal(&self) -> Option<f64> {
        if self.standard_error == 0.0 {
            return None;
        }
        let t = self.difference / self.standard_error;
        let student = StudentsT::new(0.0, 1.0, self.degrees_of_freedom).ok()?;
        Some(2.0 * student.sf(t.abs()))
    }
}

/// The two-sided p-value of Welch's t-test that samples `a` and `b` have
/// the same mean; `None` with fewer than 2 values in either, or no spread
/// in both.
pub fn welch_p(a: &[f64], b: &[f64]) -> Option<f64> {
    Welch::new(a, b)?.p_equal()
}

/// The difference of the means of `mine` and `theirs` and Welch's p-value
/// ("no difference measured" above 0.05; no p-value with fewer than 2 runs
/// on either side).
pub(super) fn difference(mine: &[f64], theirs: &[f64]) -> String {
    let difference = mean_std(mine).0 - mean_std(theirs).0;
    match welch_p(mine, theirs) {
        Some(p) if p > 0.05 => format!("{difference:+.4} (p {p:.2}: no difference measured)"),
        Some(p) => format!("{difference:+.4} (p {p:.3})"),
        None => format!("{difference:+.4}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_p_values_match_an_independent_computation() {
        // Reference: Welch's t and degrees of freedom, then the t density
        // integrated numerically (Simpson) in Python from the formulas.
        let p = welch_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        assert!((p - 0.107_531_194_9).abs() < 1e-6, "{p}");
        let a = [0.7952, 0.7921, 0.7983];
        let b = [0.7877, 0.7850, 0.7905];
        let p = welch_p(&a, &b).unwrap();
        assert!((p - 0.036_188_757_2).abs() < 1e-6, "{p}");
        assert_eq!(welch_p(&a, &b[..1]), None);
        assert_eq!(welch_p(&[1.0, 1.0], &[1.0, 1.0]), None);
    }

    #[test]
    fn one_sided_p_values_match_an_independent_computation() {
        // Reference: t = 2.7028 and df = 3.944 from the formulas, the t
        // density integrated numerically (Simpson) in Python above t.
        let a = [0.7952, 0.7921, 0.7983];
        let b = [0.7877, 0.7850, 0.7905];
        let welch = Welch::new(&a, &b).unwrap();
        let p = welch.p_above(0.001);
        assert!((p - 0.027_378_989).abs() < 1e-6, "{p}");
        let half = welch.p_above(0.0);
        assert!((2.0 * half - welch.p_equal().unwrap()).abs() < 1e-12);
        let constant = Welch::new(&[1.0, 1.0], &[0.0, 0.0]).unwrap();
        assert_eq!((constant.p_above(0.5), constant.p_above(2.0)), (0.0, 1.0));
    }

    #[test]
    fn mean_and_sample_standard_deviation() {
        let (mean, std) = mean_std(&[1.0, 2.0, 3.0, 6.0]);
        assert_eq!(mean, 3.0);
        // Σ(x−3)² = 4 + 1 + 0 + 9 = 14; 14 / 3.
        assert!((std - (14.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_std(&[5.0]), (5.0, 0.0));
        assert!(mean_std(&[]).0.is_nan());
    }
}
