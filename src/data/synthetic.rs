//! Synthetic Criteo-format data from a planted model whose click probabilities are
//! known, so the best achievable logloss (the oracle's) is known too.
//!
//! The planted logit of a row is a sum of
//! * dense effects: `w_j · (ln(1 + count_j) − μ_j)` for each present count
//!   (log-normal counts, some missing), and a per-field effect when missing;
//! * per-token categorical effects: each of the 26 fields draws tokens from a Zipf
//!   distribution over its vocabulary, and each token has a fixed Gaussian effect;
//! * a few pairwise field interactions: a fixed Gaussian effect per token pair;
//! * a bias calibrated so that the base CTR is about 25%.
//!
//! Everything is a pure function of the seed: the same seed writes the same bytes.

use crate::data::{NUM_DENSE, NUM_SPARSE};
use crate::metrics::binary_entropy;
use crate::{Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Zipf};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// How many distinct tokens each of the 26 categorical fields draws from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Criteo-like, scaled down (3 to 200,000 tokens a field): a pass of a
    /// million rows sees most of every field's tokens.
    #[default]
    Compact,
    /// Criteo Kaggle's published cardinalities (3 to 10,131,227 tokens a
    /// field, 33.8M in all): most tokens are rare, as in real logs, and
    /// hashed into tables of thousands of rows the hot ones collide.
    Criteo,
}

impl Profile {
    /// Each field's number of tokens.
    pub fn vocabulary(self) -> [u32; NUM_SPARSE] {
        match self {
            Self::Compact => [
                1_000, 500, 200_000, 100_000, 300, 20, 10_000, 600, 3, 50_000, 5_000, 150_000,
                3_000, 25, 10_000, 120_000, 10, 4_000, 2_000, 4, 150_000, 15, 15, 50_000, 80,
                40_000,
            ],
            // The Criteo Display Advertising Challenge (Kaggle) data's counts
            // of distinct values, C1 to C26.
            Self::Criteo => [
                1_460, 583, 10_131_227, 2_202_608, 305, 24, 12_517, 633, 3, 93_145, 5_683,
                8_351_593, 3_194, 27, 14_992, 5_461_306, 10, 5_652, 2_173, 4, 7_046_547, 18, 15,
                286_181, 105, 142_572,
            ],
        }
    }
}
/// Fields whose token pairs carry an extra effect.
const INTERACTIONS: [(usize, usize); 4] = [(0, 4), (5, 8), (13, 16), (1, 21)];
/// Zipf exponent of token popularity.
const ZIPF_EXPONENT: f64 = 1.15;
/// Target base click-through rate.
const TARGET_CTR: f64 = 0.25;

/// The hidden model that labels synthetic rows.
#[derive(Debug, Clone)]
struct PlantedModel {
    seed: u64,
    bias: f64,
    dense_weight: [f64; NUM_DENSE],
    dense_mu: [f64; NUM_DENSE],
    dense_sigma: [f64; NUM_DENSE],
    dense_missing: [f64; NUM_DENSE],
    missing_effect: [f64; NUM_DENSE],
    token_scale: [f64; NUM_SPARSE],
    token_missing: [f64; NUM_SPARSE],
    zipf: Vec<Zipf<f64>>,
}

/// One generated row: raw counts (None = missing), token ranks (0 = missing), and
/// the true click probability.
#[derive(Debug, Clone)]
struct Row {
    /// Counts as written to the file.
    pub counts: [Option<i64>; NUM_DENSE],
    /// Token rank per field (1-based), 0 when missing.
    pub tokens: [u64; NUM_SPARSE],
    /// True click probability.
    pub p: f64,
}

impl PlantedModel {
    /// Draws a planted model from `seed`, its tokens from `profile`'s
    /// vocabularies, and calibrates its bias to a 25% CTR.
    fn new(seed: u64, profile: Profile) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = Self {
            seed,
            bias: 0.0,
            dense_weight: std::array::from_fn(|_| rng.random_range(-0.45..0.45)),
            dense_mu: std::array::from_fn(|_| rng.random_range(0.0..3.0)),
            dense_sigma: std::array::from_fn(|_| rng.random_range(0.5..1.5)),
            dense_missing: std::array::from_fn(|_| rng.random_range(0.0..0.45)),
            missing_effect: std::array::from_fn(|_| rng.random_range(-0.3..0.3)),
            token_scale: std::array::from_fn(|_| rng.random_range(0.15..0.55)),
            token_missing: std::array::from_fn(|_| {
                if rng.random_bool(0.3) {
                    rng.random_range(0.1..0.5)
                } else {
                    0.0
                }
            }),
            zipf: (profile.vocabulary().iter())
                .map(|&n| Zipf::new(f64::from(n), ZIPF_EXPONENT).expect("valid Zipf constants"))
                .collect(),
        };
        model.bias = model.calibrated_bias();
        model
    }

    /// The bias that makes the mean click probability [`TARGET_CTR`].
    fn calibrated_bias(&self) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0xb1a5);
        let logits: Vec<f64> = (0..20_000).map(|_| self.sample(&mut rng).1).collect();
        let mean_ctr = |b: f64| logits.iter().map(|z| sigmoid(b + z)).sum::<f64>() / 20_000.0;
        let (mut lo, mut hi) = (-20.0, 20.0);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if mean_ctr(mid) < TARGET_CTR {
                lo = mid
            } else {
                hi = mid
            }
        }
        0.5 * (lo + hi)
    }

    /// Draws a row's features and its logit without the bias.
    fn sample(&self, rng: &mut ChaCha8Rng) -> (Row, f64) {
        let mut z = 0.0;
        let mut counts = [None; NUM_DENSE];
        for (j, slot) in counts.iter_mut().enumerate() {
            if rng.random_bool(self.dense_missing[j]) {
                z += self.missing_effect[j];
                continue;
            }
            let normal = Normal::new(self.dense_mu[j], self.dense_sigma[j]).expect("sigma > 0");
            let log_count: f64 = normal.sample(rng).max(0.0);
            let count = log_count.exp_m1().floor() as i64;
            z += self.dense_weight[j] * ((count as f64).ln_1p() - self.dense_mu[j]);
            // Like Criteo's I2, the second count is sometimes -1.
            *slot = Some(if j == 1 && rng.random_bool(0.05) {
                -1
            } else {
                count
            });
        }
        let mut tokens = [0u64; NUM_SPARSE];
        for (f, token) in tokens.iter_mut().enumerate() {
            if !rng.random_bool(self.token_missing[f]) {
                *token = self.zipf[f].sample(rng) as u64;
                z += self.token_scale[f] * gaussian(mix(&[self.seed, f as u64, *token]));
            }
        }
        for (i, &(f, g)) in INTERACTIONS.iter().enumerate() {
            if tokens[f] != 0 && tokens[g] != 0 {
                let h = mix(&[self.seed, 1000 + i as u64, tokens[f], tokens[g]]);
                z += 0.6 * gaussian(h);
            }
        }
        (
            Row {
                counts,
                tokens,
                p: 0.0,
            },
            z,
        )
    }

    /// Draws one row with its true click probability.
    fn row(&self, rng: &mut ChaCha8Rng) -> Row {
        let (mut row, z) = self.sample(rng);
        row.p = sigmoid(self.bias + z);
        row
    }

    /// The 8-hex-digit value written for token `rank` of field `field`.
    fn token_value(&self, field: usize, rank: u64) -> u32 {
        (mix(&[self.seed, 7_000 + field as u64, rank]) >> 32) as u32
    }

    /// Writes `rows` labelled rows as Criteo TSV; returns the oracle's figures.
    ///
    /// # Errors
    ///
    /// A file that cannot be written ([`Error::Io`]).
    fn write_tsv(&self, out: &mut impl Write, rows: u64, stream: u64) -> std::io::Result<Oracle> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        let mut oracle = OracleSum::default();
        let mut line = String::with_capacity(512);
        for _ in 0..rows {
            let row = self.row(&mut rng);
            let label = rng.random_bool(row.p);
            oracle.add(row.p, label);
            line.clear();
            line.push(if label { '1' } else { '0' });
            for count in row.counts {
                line.push('\t');
                if let Some(c) = count {
                    line.push_str(&c.to_string());
                }
            }
            for (f, &rank) in row.tokens.iter().enumerate() {
                line.push('\t');
                if rank != 0 {
                    line.push_str(&format!("{:08x}", self.token_value(f, rank)));
                }
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        Ok(oracle.finish())
    }
}

/// The figures of the true probabilities on a generated file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Oracle {
    /// Rows written.
    pub rows: u64,
    /// Fraction of clicks.
    pub ctr: f64,
    /// Logloss of the true probabilities on the drawn labels.
    pub logloss: f64,
    /// That logloss ÷ the entropy of the file's CTR.
    pub ne: f64,
}

#[derive(Default)]
struct OracleSum {
    rows: u64,
    clicks: u64,
    loss: f64,
}

impl OracleSum {
    fn add(&mut self, p: f64, label: bool) {
        self.rows += 1;
        self.clicks += u64::from(label);
        self.loss -= if label { p.ln() } else { (1.0 - p).ln() };
    }

    fn finish(self) -> Oracle {
        let rows = self.rows.max(1) as f64;
        let ctr = self.clicks as f64 / rows;
        let logloss = self.loss / rows;
        Oracle {
            rows: self.rows,
            ctr,
            logloss,
            ne: logloss / binary_entropy(ctr),
        }
    }
}

/// What `gen-data` writes: a train and a test file from one planted model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticSpec {
    /// Training rows.
    pub train_rows: u64,
    /// Test rows.
    pub test_rows: u64,
    /// Seed of the planted model and of the rows.
    pub seed: u64,
    /// The fields' vocabularies.
    #[serde(default)]
    pub profile: Profile,
}

/// Files and oracle figures of a generated data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticData {
    /// What was generated.
    pub spec: SyntheticSpec,
    /// The training file.
    pub train: PathBuf,
    /// The test file.
    pub test: PathBuf,
    /// Oracle figures on the training file.
    pub train_oracle: Oracle,
    /// Oracle figures on the test file.
    pub test_oracle: Oracle,
}

impl SyntheticData {
    const MANIFEST: &'static str = "oracle.json";

    /// Writes `train.tsv`, `test.tsv` and `oracle.json` into `dir`, where it
    /// never replaces files it did not make (a `train.tsv` or `test.tsv`
    /// without the `oracle.json` of an earlier generation: the user's own).
    ///
    /// # Errors
    ///
    /// Files in `dir` it did not make, or a directory or file that cannot be written
    /// ([`Error::Io`]).
    pub fn generate(spec: SyntheticSpec, dir: &Path) -> Result<Self> {
        if !dir.join(Self::MANIFEST).exists() {
            let theirs = ["train.tsv", "test.tsv"]
                .map(|name| dir.join(name))
                .into_iter()
                .find(|path| path.exists());
            if let Some(path) = theirs {
                return Err(Error::data(
                    path,
                    format!(
                        "is not data this generator made (no {} beside it): writing there \
                         would destroy it; choose another directory",
                        Self::MANIFEST
                    ),
                ));
            }
        }
        Self::write(spec, dir)
    }

    /// Writes the data set into `dir`. Each file is written under a temporary
    /// name and renamed into place, so processes generating the same data at
    /// once (the ranks of an `mpirun` job) never read a partial file.
    fn write(spec: SyntheticSpec, dir: &Path) -> Result<Self> {
        crate::output::create_dir(dir)?;
        let model = PlantedModel::new(spec.seed, spec.profile);
        let write = |name: &str, rows: u64, stream: u64| -> Result<(PathBuf, Oracle)> {
            let path = dir.join(name);
            let partial = partial_path(&path);
            let file = File::create(&partial).map_err(|e| Error::io(&partial, e))?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            let written = model
                .write_tsv(&mut out, rows, stream)
                .and_then(|o| out.flush().map(|()| o))
                .and_then(|o| std::fs::rename(&partial, &path).map(|()| o));
            match written {
                Ok(oracle) => Ok((path, oracle)),
                Err(e) => {
                    // A full disk leaves nothing half-written behind.
                    let _ = std::fs::remove_file(&partial);
                    Err(Error::io(&path, e))
                }
            }
        };
        let (train, train_oracle) = write("train.tsv", spec.train_rows, 1)?;
        let (test, test_oracle) = write("test.tsv", spec.test_rows, 2)?;
        let data = Self {
            spec,
            train,
            test,
            train_oracle,
            test_oracle,
        };
        let manifest = dir.join(Self::MANIFEST);
        let json = serde_json::to_vec_pretty(&data).map_err(|e| Error::io(&manifest, e.into()))?;
        crate::output::write_atomic(&manifest, &json)?;
        Ok(data)
    }

    /// Reuses the data set in `dir` if it was generated from `spec`, else generates it.
    ///
    /// # Errors
    ///
    /// As [`SyntheticData::generate`].
    pub fn ensure(spec: SyntheticSpec, dir: &Path) -> Result<Self> {
        let manifest = dir.join(Self::MANIFEST);
        if let Ok(bytes) = std::fs::read(&manifest) {
            if let Ok(data) = serde_json::from_slice::<Self>(&bytes) {
                if data.spec == spec && data.train.exists() && data.test.exists() {
                    return Ok(data);
                }
            }
        }
        // The cache's own directory: a half-made set of an interrupted run,
        // or another rank's being made, is written over.
        Self::write(spec, dir)
    }
}

/// Where this process writes `path` before renaming it into place.
fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".partial-{}", std::process::id()));
    PathBuf::from(name)
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// SplitMix64-style mixing of a few words into one well-spread hash.
fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x9e37_79b9_7f4a_7c15, |h, &w| {
        let mut x = h ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    })
}

/// A standard normal value determined by a hash (Box–Muller on its two halves).
fn gaussian(h: u64) -> f64 {
    let u1 = ((h >> 32) as f64 + 1.0) / (u32::MAX as f64 + 2.0);
    let u2 = (h & 0xffff_ffff) as f64 / (u32::MAX as f64 + 1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::parse_line;

    #[test]
    fn same_seed_same_bytes_and_rows_parse() {
        let model = PlantedModel::new(3, Profile::Compact);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let oa = model.write_tsv(&mut a, 500, 1).unwrap();
        let ob = PlantedModel::new(3, Profile::Compact)
            .write_tsv(&mut b, 500, 1)
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(oa, ob);
        let mut c = Vec::new();
        PlantedModel::new(4, Profile::Compact)
            .write_tsv(&mut c, 500, 1)
            .unwrap();
        assert_ne!(a, c);
        for line in a.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            parse_line(line).unwrap();
        }
    }

    #[test]
    fn base_ctr_is_near_a_quarter_and_the_oracle_beats_the_base_rate() {
        for profile in [Profile::Compact, Profile::Criteo] {
            let mut sink = std::io::sink();
            let oracle = PlantedModel::new(11, profile)
                .write_tsv(&mut sink, 20_000, 1)
                .unwrap();
            assert!(
                (oracle.ctr - 0.25).abs() < 0.02,
                "{profile:?}: ctr {}",
                oracle.ctr
            );
            assert!(
                oracle.ne < 0.95 && oracle.ne > 0.3,
                "{profile:?}: oracle NE {}",
                oracle.ne
            );
        }
    }

    /// Under the Criteo profile a field of 10M tokens sees mostly tokens it
    /// saw once, its most popular token in every few rows.
    #[test]
    fn the_criteo_profile_draws_rare_tokens_and_hot_ones() {
        let model = PlantedModel::new(5, Profile::Criteo);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut seen = std::collections::HashMap::<u64, u32>::new();
        let rows = 20_000;
        for _ in 0..rows {
            let token = model.row(&mut rng).tokens[2];
            *seen.entry(token).or_default() += 1;
        }
        let once = seen.values().filter(|&&n| n == 1).count();
        let hottest = seen
            .iter()
            .filter(|(&t, _)| t != 0)
            .map(|(_, &n)| n)
            .max()
            .unwrap();
        assert!(
            once > seen.len() / 2,
            "{once} of {} tokens seen once",
            seen.len()
        );
        assert!(hottest > rows / 50, "the hottest token in {hottest} rows");
        let compact = Profile::Compact.vocabulary();
        assert!(Profile::Criteo
            .vocabulary()
            .iter()
            .zip(compact)
            .all(|(c, s)| *c >= s / 2));
    }

    #[test]
    fn gaussian_hash_has_unit_moments() {
        let xs: Vec<f64> = (0..100_000u64).map(|i| gaussian(mix(&[i]))).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
    }
}
