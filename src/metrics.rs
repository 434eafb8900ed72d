//! Quality metrics of click predictions (docs/design.md §3).
//!
//! * **logloss**: mean binary cross-entropy, predictions clamped to
//!   `[1e-7, 1 − 1e-7]`;
//! * **NE**: logloss ÷ the entropy of the set's average CTR (1.0 = no better than
//!   always predicting the base rate; lower is better);
//! * **AUC**: exact ROC AUC over all examples, tied scores counting one half;
//! * **calibration**: mean prediction ÷ observed CTR (1.0 = calibrated).

use serde::{Deserialize, Serialize};
use shadowsync_actors::stats::null_as_nan;

/// Metrics of one evaluation. In JSON a figure that is not finite (an AUC
/// with one class absent) is `null`, read back as NaN.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Examples evaluated.
    pub examples: u64,
    /// Mean logloss.
    #[serde(deserialize_with = "null_as_nan")]
    pub logloss: f64,
    /// Normalized entropy.
    #[serde(deserialize_with = "null_as_nan")]
    pub ne: f64,
    /// ROC AUC (NaN when one class is absent).
    #[serde(deserialize_with = "null_as_nan")]
    pub auc: f64,
    /// Mean prediction ÷ CTR.
    #[serde(deserialize_with = "null_as_nan")]
    pub calibration: f64,
    /// Observed click-through rate.
    #[serde(deserialize_with = "null_as_nan")]
    pub ctr: f64,
}

impl Metrics {
    /// The field-by-field mean of several evaluations (of several models on the
    /// same data); `None` for none.
    pub fn mean(all: &[Metrics]) -> Option<Metrics> {
        let n = all.len() as f64;
        let mean = |f: fn(&Metrics) -> f64| all.iter().map(f).sum::<f64>() / n;
        let first = all.first()?;
        Some(Metrics {
            examples: first.examples,
            logloss: mean(|m| m.logloss),
            ne: mean(|m| m.ne),
            auc: mean(|m| m.auc),
            calibration: mean(|m| m.calibration),
            ctr: mean(|m| m.ctr),
        })
    }
}

/// `−(p ln p + (1−p) ln(1−p))`, 0 at p ∈ {0, 1}.
pub fn binary_entropy(p: f64) -> f64 {
    let term = |q: f64| if q > 0.0 { -q * q.ln() } else { 0.0 };
    term(p) + term(1.0 - p)
}

/// Computes all metrics of `predictions` (probabilities) against 0/1 `labels`.
pub fn evaluate(predictions: &[f32], labels: &[f32]) -> Metrics {
    assert_eq!(predictions.len(), labels.len(), "one prediction per label");
    let n = labels.len().max(1) as f64;
    let clicks: f64 = labels.iter().map(|&y| f64::from(y)).sum();
    let ctr = clicks / n;
    let loss: f64 = predictions
        .iter()
        .zip(labels)
        .map(|(&p, &y)| {
            let p = f64::from(p).clamp(1e-7, 1.0 - 1e-7);
            if y > 0.5 {
                -p.ln()
            } else {
                -(1.0 - p).ln()
            }
        })
        .sum();
    let logloss = loss / n;
    let mean_prediction: f64 = predictions.iter().map(|&p| f64::from(p)).sum::<f64>() / n;
    Metrics {
        examples: labels.len() as u64,
        logloss,
        ne: logloss / binary_entropy(ctr),
        auc: auc(predictions, labels),
        calibration: mean_prediction / ctr,
        ctr,
    }
}

/// Exact ROC AUC by ranks (Mann–Whitney U), tied scores sharing their mean rank.
pub fn auc(scores: &[f32], labels: &[f32]) -> f64 {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_unstable_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let positives = labels.iter().filter(|&&y| y > 0.5).count() as f64;
    let negatives = labels.len() as f64 - positives;
    let mut positive_rank_sum = 0.0;
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && scores[order[end]] == scores[order[start]] {
            end += 1;
        }
        // Ranks start+1 ..= end share their mean.
        let mean_rank = (start + 1 + end) as f64 / 2.0;
        let tied_positives = order[start..end]
            .iter()
            .filter(|&&i| labels[i] > 0.5)
            .count();
        positive_rank_sum += mean_rank * tied_positives as f64;
        start = end;
    }
    (positive_rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives)
}

/// One evaluation during training: the metrics, and when they were taken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// Training examples seen before this evaluation.
    pub examples: u64,
    /// Training wall-clock seconds before it (evaluations excluded).
    pub train_seconds: f64,
    /// Test metrics.
    pub metrics: Metrics,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_metric_that_is_not_finite_reads_back_from_json_as_nan() {
        let one_class = evaluate(&[0.2, 0.7], &[0.0, 0.0]);
        assert!(one_class.auc.is_nan());
        let json = serde_json::to_string(&one_class).unwrap();
        assert!(json.contains("\"auc\":null"), "{json}");
        let back: Metrics = serde_json::from_str(&json).unwrap();
        assert!(back.auc.is_nan());
        assert_eq!((back.examples, back.logloss), (2, one_class.logloss));
    }

    /// Independent AUC: the fraction of (positive, negative) pairs ranked right.
    fn pairwise_auc(scores: &[f32], labels: &[f32]) -> f64 {
        let (mut good, mut pairs) = (0.0, 0.0);
        for (i, &yi) in labels.iter().enumerate() {
            for (j, &yj) in labels.iter().enumerate() {
                if yi > 0.5 && yj < 0.5 {
                    pairs += 1.0;
                    good += match scores[i].total_cmp(&scores[j]) {
                        std::cmp::Ordering::Greater => 1.0,
                        std::cmp::Ordering::Equal => 0.5,
                        std::cmp::Ordering::Less => 0.0,
                    };
                }
            }
        }
        good / pairs
    }

    #[test]
    fn golden_values() {
        // Worked by hand: pairs (p,n) = (0.8,0.1) ✓ (0.8,0.8) ½ (0.4,0.1) ✓ (0.4,0.8) ✗
        let scores = [0.1, 0.4, 0.8, 0.8];
        let labels = [0.0, 1.0, 0.0, 1.0];
        assert!((auc(&scores, &labels) - 2.5 / 4.0).abs() < 1e-12);
        let m = evaluate(&scores, &labels);
        let expected_loss = -((0.9f64).ln() + (0.4f64).ln() + (0.2f64).ln() + (0.8f64).ln()) / 4.0;
        assert!((m.logloss - expected_loss).abs() < 1e-6);
        assert!((m.ne - expected_loss / 2f64.ln()).abs() < 1e-6);
        assert!((m.calibration - (2.1 / 4.0) / 0.5).abs() < 1e-6);
        assert_eq!(m.ctr, 0.5);
    }

    #[test]
    fn base_rate_prediction_has_ne_one() {
        let labels = [1.0, 0.0, 0.0, 0.0];
        let m = evaluate(&[0.25; 4], &labels);
        assert!((m.ne - 1.0).abs() < 1e-6);
        assert!((m.auc - 0.5).abs() < 1e-12);
        assert!((binary_entropy(0.25) - 0.562_335_144_618_885).abs() < 1e-12);
    }

    proptest! {
        #[test]
        fn rank_auc_equals_pairwise_auc(
            data in prop::collection::vec((0u8..6, any::<bool>()), 2..60)
        ) {
            let scores: Vec<f32> = data.iter().map(|(s, _)| f32::from(*s) / 5.0).collect();
            let labels: Vec<f32> = data.iter().map(|(_, y)| f32::from(u8::from(*y))).collect();
            let both = labels.iter().any(|&y| y > 0.5) && labels.iter().any(|&y| y < 0.5);
            prop_assume!(both);
            prop_assert!((auc(&scores, &labels) - pairwise_auc(&scores, &labels)).abs() < 1e-9);
        }
    }

    #[test]
    fn the_mean_of_evaluations_averages_every_rate() {
        let a = evaluate(&[0.9, 0.2, 0.7, 0.1], &[1.0, 0.0, 1.0, 0.0]);
        let b = evaluate(&[0.4, 0.6, 0.3, 0.5], &[1.0, 0.0, 1.0, 0.0]);
        let m = Metrics::mean(&[a, b]).unwrap();
        assert_eq!(m.examples, 4);
        assert!((m.ne - (a.ne + b.ne) / 2.0).abs() < 1e-12);
        assert!((m.auc - 0.5).abs() < 1e-12, "AUC 1 and 0 average to 0.5");
        assert!((m.logloss - (a.logloss + b.logloss) / 2.0).abs() < 1e-12);
        assert!(Metrics::mean(&[]).is_none());
    }
}
