//! A training run spread over processes (`mpirun -np R shadowsync train`, feature
//! `mpi`): what the processes share besides the dense replicas.
//!
//! Each process hosts `train.trainers` trainers on its part of the data (shards
//! `process·T .. (process+1)·T` of `R·T`); the cluster's groups span processes
//! and its shadow loops average the dense replicas across them. The embedding
//! table is sharded over the processes by default (see
//! [`crate::model::ShardedTable`]); with `train.embeddings = "replicated"` every
//! process keeps one, shared Hogwild-style by its trainers, and a
//! [`TableSync`] thread merges the replicas in rounds, in the background like
//! the dense sync. The processes' tables start from a common
//! *base*; each round, every process reads the rows its trainers wrote since
//! the last round (the table marks them as it updates them: a round costs in
//! proportion to the rows trained, not to the table) with their sparse
//! optimizer's state (Adagrad's sums), and sends those rows' changes from the
//! base (row index, then the changes) to all others (an all-gather); every
//! process adds all processes' changes to the base, and the other processes'
//! changes to its table, so the updates its trainers made meanwhile are kept. Summing changes rather than averaging
//! tables is what one shared table does: a row one process trained keeps its
//! whole update. The rounds end together: each carries a flag saying whether
//! the process is done training, and the round in which every process says so
//! is the last (the tables are then equal). Bytes moved per round: 4 per value
//! of each changed row (and its optimizer state), plus its index.
//!
//! With `sync.compression` set to a codec without memory of a link (`fp16`,
//! `int8`), a round's changes cross encoded (the indices whole). Every process
//! adds what was *decoded* to the base, its own changes included, so the
//! rounding error of a row stays in the difference between the table and the
//! base and goes with the row's next change (error feedback). A process that
//! is done sends once, unencoded, every row it ever sent encoded: the tables
//! still end equal, and equal to what one shared table gets.
//!
//! Under `none` a run's result is every replica's evaluation:
//! [`every_process_metrics`] brings all processes' to each.

use crate::data::ChunkDealer;
use crate::metrics::Metrics;
use crate::model::EmbeddingTable;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use shadowsync_actors::sync::{packed, unpacked, Codec, Fabric};
use shadowsync_actors::Error as RuntimeError;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tch::Tensor;

/// What the table sync did.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TableSyncReport {
    /// Rounds of averaging across processes.
    pub rounds: u64,
    /// Bytes this process put into the merges (encoded, if compressed).
    pub bytes: u64,
    /// The same, counted unencoded.
    #[serde(default)]
    pub bytes_before_compression: u64,
}

/// The background averaging of a replicated embedding table across processes.
pub struct TableSync {
    done: Arc<AtomicBool>,
    thread: JoinHandle<Result<TableSyncReport>>,
}

impl TableSync {
    /// Starts merging `table` across `fabric`'s processes every `every`,
    /// its changes encoded by `codec` if given, from their common base,
    /// which it sets before it returns: before any trainer writes a row (a
    /// row written before the base was read would count once over the
    /// processes' mean, 1/R of it).
    ///
    /// # Errors
    ///
    /// A thread that cannot start, or a base copy of the table that cannot be made.
    pub fn start(
        fabric: Arc<dyn Fabric>,
        table: EmbeddingTable,
        every: Duration,
        codec: Option<Box<dyn Codec>>,
    ) -> Result<Self> {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        table.written().track();
        let base = common_base(fabric.as_ref(), &state_of(&table)?)?;
        let thread = std::thread::Builder::new()
            .name("table-sync".into())
            .spawn(move || {
                tch::set_num_threads(1);
                sync_rounds(fabric.as_ref(), &table, (base, codec), every, &flag)
            })
            .map_err(|error| {
                runtime(RuntimeError::Thread {
                    thread: "table sync",
                    error,
                })
            })?;
        Ok(Self { done, thread })
    }

    /// This process is done training: returns after the last round, in which
    /// every process was (the replicas are then equal).
    ///
    /// # Errors
    ///
    /// A merge round that failed (a collective of the fabric), or a merge thread that
    /// panicked.
    pub fn finish(self) -> Result<TableSyncReport> {
        self.done.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| runtime(RuntimeError::Panicked("table sync thread")))?
    }
}

fn runtime(error: RuntimeError) -> Error {
    Error::Runtime(error)
}

/// The table's arrays (its rows, its optimizer's state), as one would write
/// them.
fn state_of(table: &EmbeddingTable) -> Result<Vec<Tensor>> {
    Ok(table.state()?.into_iter().map(|(_, t)| t).collect())
}

/// Rounds from `base` until every process is done, encoding by `codec` if
/// given; the last one runs with all done.
fn sync_rounds(
    fabric: &dyn Fabric,
    table: &EmbeddingTable,
    (mut base, mut codec): (Vec<f32>, Option<Box<dyn Codec>>),
    every: Duration,
    done: &AtomicBool,
) -> Result<TableSyncReport> {
    let state = state_of(table)?;
    let rows = table.weight().size().first().copied().unwrap_or(0) as usize;
    let shape = Shape {
        rows,
        width: table.width().max(1) as usize,
        blocks: state.len(),
    };
    let written = Arc::clone(table.written());
    let mut report = TableSyncReport::default();
    // The rows sent encoded whose rounding error is not sent yet.
    let mut owed = BTreeSet::new();
    loop {
        let due = Instant::now() + every;
        while Instant::now() < due && !done.load(Ordering::Relaxed) {
            std::thread::sleep(every.min(Duration::from_millis(10)));
        }
        let finished = done.load(Ordering::Relaxed);
        // Only the rows this process's trainers wrote since the last round;
        // once done, unencoded, with every row that owes a rounding error.
        let mut mine = written.take();
        let coder = if finished {
            mine = std::mem::take(&mut owed).into_iter().chain(mine).collect();
            mine.sort_unstable();
            mine.dedup();
            None
        } else {
            codec.as_mut()
        };
        let now = read_rows(&state, shape, &mine)?;
        let (changes, plain_words) = shape.changes(&base, (&mine, &now), finished, coder);
        if !finished && codec.is_some() {
            owed.extend(&mine);
        }
        report.rounds += 1;
        report.bytes += 4 * changes.len() as u64;
        report.bytes_before_compression += 4 * plain_words as u64;
        let mut all_done = true;
        // What the others changed, to add here: the table here already has
        // its own trainers' changes (and whatever they did since).
        let mut theirs = Changes::default();
        for (process, changes) in fabric.gather(changes)?.iter().enumerate() {
            let coder = codec.as_mut();
            let (process_done, changes) = shape.parse(changes, coder).map_err(|reason| {
                runtime(RuntimeError::Remote {
                    process,
                    reason: format!("table sync: its changes: {reason}"),
                })
            })?;
            all_done &= process_done;
            let per_row = shape.blocks * shape.width;
            for (&row, deltas) in changes.rows.iter().zip(changes.deltas.chunks(per_row)) {
                for (range, delta) in shape.row(row).zip(deltas.chunks(shape.width)) {
                    base[range].iter_mut().zip(delta).for_each(|(b, d)| *b += d);
                }
            }
            if process != fabric.process() {
                theirs.rows.extend(changes.rows);
                theirs.deltas.extend(changes.deltas);
            }
        }
        table.exclusive(|| add_rows(&state, shape, &theirs))?;
        if all_done {
            return Ok(report);
        }
    }
}

/// Rows' changes in every block: `deltas` holds, row after row, each block's
/// `width` values.
#[derive(Debug, Default)]
struct Changes {
    rows: Vec<usize>,
    deltas: Vec<f32>,
}

/// How the table and its optimizer state lie in one vector: `blocks` arrays
/// (the table, Adagrad's sums) of `rows` rows of `width` values.
#[derive(Debug, Clone, Copy)]
struct Shape {
    rows: usize,
    width: usize,
    blocks: usize,
}

impl Shape {
    /// The values of `row` in each block.
    fn row(&self, row: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..self.blocks).map(move |b| {
            let start = (b * self.rows + row) * self.width;
            start..start + self.width
        })
    }

    /// What `rows` now hold (`now`: row after row, every block's values) and
    /// `base` does not, as words, and how many words it would take
    /// unencoded. Unencoded: `[flags, then per row that differs: its index
    /// and its changes in every block (f32 bits)]`; encoded by `codec`:
    /// `[flags, rows, each row's index, bytes, the changes' encoding (4 bytes
    /// a word)]`. Flags: 1 done, 2 encoded.
    fn changes(
        &self,
        base: &[f32],
        (rows, now): (&[usize], &[f32]),
        done: bool,
        codec: Option<&mut Box<dyn Codec>>,
    ) -> (Vec<u32>, usize) {
        let per_row = self.blocks * self.width;
        let (mut changed, mut deltas) = (Vec::new(), Vec::new());
        for (&row, now) in rows.iter().zip(now.chunks(per_row)) {
            let start = deltas.len();
            deltas.extend(
                self.row(row)
                    .zip(now.chunks(self.width))
                    .flat_map(|(range, now)| now.iter().zip(&base[range]).map(|(n, b)| n - b)),
            );
            if deltas[start..].iter().all(|&d| d == 0.0) {
                deltas.truncate(start)
            } else {
                changed.push(row as u32)
            }
        }
        let plain_words = 1 + changed.len() * (1 + per_row);
        let flags = u32::from(done) | if codec.is_some() { CODED } else { 0 };
        let mut words = vec![flags];
        match codec {
            None => {
                for (row, deltas) in changed.iter().zip(deltas.chunks(per_row)) {
                    words.push(*row);
                    words.extend(deltas.iter().map(|d| d.to_bits()));
                }
            }
            Some(codec) => {
                words.push(changed.len() as u32);
                words.extend(&changed);
                let mut wire = Vec::new();
                codec.encode(0, &deltas, &mut wire);
                words.push(wire.len() as u32);
                words.extend(packed(&wire));
            }
        }
        (words, plain_words)
    }

    /// A process's words: whether it is done, and the rows it changed with
    /// their changes in every block (decoded by `codec` if encoded).
    fn parse(
        &self,
        words: &[u32],
        codec: Option<&mut Box<dyn Codec>>,
    ) -> std::result::Result<(bool, Changes), String> {
        let (&flags, rest) = words.split_first().ok_or("empty")?;
        let done = flags & 1 == 1;
        if flags & CODED != 0 {
            let codec = codec
                .ok_or("encoded changes, but sync.compression here names no codec for rows")?;
            return Ok((done, self.decode(rest, codec)?));
        }
        let mut rest = rest;
        let mut changes = Changes::default();
        let per_row = 1 + self.blocks * self.width;
        while !rest.is_empty() {
            if rest.len() < per_row {
                return Err(format!("{} words, not a whole row", rest.len()));
            }
            let (entry, after) = rest.split_at(per_row);
            rest = after;
            let row = entry[0] as usize;
            if row >= self.rows {
                return Err(format!("row {row} of {}", self.rows));
            }
            changes.rows.push(row);
            changes
                .deltas
                .extend(entry[1..].iter().map(|&w| f32::from_bits(w)));
        }
        Ok((done, changes))
    }

    /// Encoded changes: `[rows, each row's index, bytes, the encoding]`.
    fn decode(
        &self,
        words: &[u32],
        codec: &mut Box<dyn Codec>,
    ) -> std::result::Result<Changes, String> {
        let (&count, rest) = words.split_first().ok_or("no row count")?;
        let count = count as usize;
        if rest.len() <= count {
            return Err(format!("{} words for {count} rows", rest.len()));
        }
        let (rows, rest) = rest.split_at(count);
        let (&bytes, encoded) = rest.split_first().ok_or("no byte count")?;
        let wire = unpacked(encoded, bytes)?;
        let rows: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
        if let Some(row) = rows.iter().find(|&&r| r >= self.rows) {
            return Err(format!("row {row} of {}", self.rows));
        }
        let mut deltas = vec![0f32; rows.len() * self.blocks * self.width];
        codec
            .decode(0, &wire, &mut deltas)
            .map_err(|e| format!("its encoding: {e}"))?;
        Ok(Changes { rows, deltas })
    }
}

/// The flag of encoded changes.
const CODED: u32 = 2;

/// Every process's `mine` (evaluations of its replicas), in process order: a
/// collective, as [`Fabric::gather`].
///
/// # Errors
///
/// As [`Fabric::gather`]; words from another process that are not metrics.
pub fn every_process_metrics(fabric: &dyn Fabric, mine: Vec<Metrics>) -> Result<Vec<Metrics>> {
    if fabric.processes() == 1 {
        return Ok(mine);
    }
    let fields: Vec<u64> = mine.iter().flat_map(metric_fields).collect();
    let mut all = Vec::new();
    for (process, fields) in every_process_u64s(fabric, &fields)?.iter().enumerate() {
        if fields.len() % METRIC_FIELDS != 0 {
            return Err(remote(
                process,
                format!(
                    "sent {} fields of evaluations, not a multiple of {METRIC_FIELDS}",
                    fields.len()
                ),
            ));
        }
        all.extend(fields.chunks(METRIC_FIELDS).map(metrics_of_fields));
    }
    Ok(all)
}

/// Deals a shared pass's chunks among the job's processes through the
/// fabric: rank 0 deals them ([`Fabric::deal`]).
#[derive(Debug)]
pub struct FabricDealer(pub Arc<dyn Fabric>);

impl ChunkDealer for FabricDealer {
    fn deal(&self, from: u64, count: u64) -> Result<Range<u64>> {
        Ok(self.0.deal(from, count)?)
    }
}

/// Every process's `mine`, in process order: a collective, as
/// [`Fabric::gather`].
///
/// # Errors
///
/// As [`Fabric::gather`].
pub fn every_process_u64s(fabric: &dyn Fabric, mine: &[u64]) -> Result<Vec<Vec<u64>>> {
    let words = mine
        .iter()
        .flat_map(|&v| [v as u32, (v >> 32) as u32])
        .collect();
    fabric
        .gather(words)?
        .into_iter()
        .enumerate()
        .map(|(process, words)| match words.len() % 2 {
            0 => Ok(words
                .chunks(2)
                .map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32))
                .collect()),
            _ => Err(remote(
                process,
                format!("sent {} words, an odd number", words.len()),
            )),
        })
        .collect()
}

fn remote(process: usize, reason: String) -> Error {
    runtime(RuntimeError::Remote { process, reason })
}

/// Fields of one [`Metrics`], as 64-bit words.
const METRIC_FIELDS: usize = 6;

fn metric_fields(m: &Metrics) -> [u64; METRIC_FIELDS] {
    [
        m.examples,
        m.logloss.to_bits(),
        m.ne.to_bits(),
        m.auc.to_bits(),
        m.calibration.to_bits(),
        m.ctr.to_bits(),
    ]
}

fn metrics_of_fields(fields: &[u64]) -> Metrics {
    let float = |i: usize| f64::from_bits(fields[i]);
    Metrics {
        examples: fields[0],
        logloss: float(1),
        ne: float(2),
        auc: float(3),
        calibration: float(4),
        ctr: float(5),
    }
}

/// Values per all-reduce of [`common_base`]: 64 MB.
const BASE_CHUNK: i64 = 1 << 24;

/// The processes' common starting point, the mean of their tables (and
/// optimizer state), added to this process's as a change (what its trainers
/// did meanwhile is kept). Averaged chunk by chunk: besides the base it
/// returns, a round takes a chunk's memory, not the table's.
fn common_base(fabric: &dyn Fabric, state: &[Tensor]) -> Result<Vec<f32>> {
    let mut base = Vec::with_capacity(state.iter().map(Tensor::numel).sum());
    for tensor in state {
        let flat = tensor.f_view(-1)?;
        let len = flat.numel() as i64;
        for start in (0..len).step_by(BASE_CHUNK as usize) {
            let mut part = flat.f_narrow(0, start, BASE_CHUNK.min(len - start))?;
            let own = Vec::<f32>::try_from(&part)?;
            let mut mean = own.clone();
            fabric.average(&mut mean)?;
            let delta: Vec<f32> = mean.iter().zip(&own).map(|(m, o)| m - o).collect();
            let delta = Tensor::f_from_slice(&delta)?;
            let _ = tch::no_grad(|| part.f_add_(&delta))?;
            base.extend_from_slice(&mean);
        }
    }
    Ok(base)
}

/// The values of `rows` in every block of the tensors: row after row, each
/// block's `width` values.
fn read_rows(state: &[Tensor], shape: Shape, rows: &[usize]) -> Result<Vec<f32>> {
    let mut now = vec![0f32; rows.len() * shape.blocks * shape.width];
    if rows.is_empty() {
        return Ok(now);
    }
    let index = Tensor::f_from_slice(&rows.iter().map(|&r| r as i64).collect::<Vec<_>>())?;
    let per_row = shape.blocks * shape.width;
    for (block, tensor) in state.iter().enumerate() {
        let table = tensor.f_view([shape.rows as i64, shape.width as i64])?;
        let values = Vec::<f32>::try_from(&table.f_index_select(0, &index)?.f_view(-1)?)?;
        for (row, values) in now.chunks_mut(per_row).zip(values.chunks(shape.width)) {
            row[block * shape.width..(block + 1) * shape.width].copy_from_slice(values);
        }
    }
    Ok(now)
}

/// Adds `changes` to the tensors' rows (in place: what was trained here
/// meanwhile is kept; a row changed by several processes gets every change).
fn add_rows(state: &[Tensor], shape: Shape, changes: &Changes) -> Result<()> {
    if changes.rows.is_empty() {
        return Ok(());
    }
    let index = Tensor::f_from_slice(&changes.rows.iter().map(|&r| r as i64).collect::<Vec<_>>())?;
    let per_row = shape.blocks * shape.width;
    for (block, tensor) in state.iter().enumerate() {
        let delta: Vec<f32> = changes
            .deltas
            .chunks(per_row)
            .flat_map(|row| &row[block * shape.width..(block + 1) * shape.width])
            .copied()
            .collect();
        let delta = Tensor::f_from_slice(&delta)?
            .f_view([changes.rows.len() as i64, shape.width as i64])?;
        let mut table = tensor.f_view([shape.rows as i64, shape.width as i64])?;
        let _ = tch::no_grad(|| table.f_index_add_(0, &index, &delta))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shadowsync_actors::sync::{InProcess, Int8};

    #[test]
    fn evaluations_cross_processes_bit_for_bit() {
        let m = Metrics {
            examples: (3 << 32) + 7,
            logloss: 0.25,
            ne: f64::NAN,
            auc: 0.75,
            calibration: -1.5e-300,
            ctr: 1.0 / 3.0,
        };
        let crossed = every_process_u64s(&InProcess, &metric_fields(&m)).unwrap();
        let back = metrics_of_fields(&crossed[0]);
        assert_eq!(back.examples, m.examples);
        for (a, b) in [
            (back.logloss, m.logloss),
            (back.ne, m.ne),
            (back.auc, m.auc),
            (back.calibration, m.calibration),
            (back.ctr, m.ctr),
        ] {
            assert_eq!(a.to_bits(), b.to_bits());
        }
    }

    #[test]
    fn changed_rows_cross_and_add_up_to_what_one_shared_table_gets() {
        // Two blocks (table, sums) of 3 rows of 2.
        let shape = Shape {
            rows: 3,
            width: 2,
            blocks: 2,
        };
        let base = vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5];
        // Process A wrote row 0 (and its sums); process B rows 0 and 2, and
        // row 1 back to what it was (written, unchanged: not sent).
        let (from_a, _) = shape.changes(&base, (&[0], &[1.25, 1.0, 4.5, 0.5]), false, None);
        let (from_b, plain) = shape.changes(
            &base,
            (
                &[0, 1, 2],
                &[1.0, 0.5, 0.5, 0.5, 2.0, 2.0, 0.5, 0.5, 3.0, 4.0, 0.5, 2.5],
            ),
            true,
            None,
        );
        assert_eq!(plain, from_b.len());
        assert_eq!(
            from_a.len(),
            1 + 5,
            "done flag, then one row: index and 4 values"
        );
        assert_eq!(from_b.len(), 1 + 2 * 5);
        assert_eq!((from_a[0], from_b[0]), (0, 1), "the done flags");
        let (a_done, a) = shape.parse(&from_a, None).unwrap();
        let (b_done, b) = shape.parse(&from_b, None).unwrap();
        assert_eq!((a_done, b_done), (false, true));
        assert_eq!((&a.rows, &a.deltas), (&vec![0], &vec![0.25, 0.0, 4.0, 0.0]));
        assert_eq!(b.rows, vec![0, 2]);
        assert_eq!(b.deltas, vec![0.0, -0.5, 0.0, 0.0, 0.0, 1.0, 0.0, 2.0]);
        // Added to a table, A's and B's changes add up (as in one shared table),
        // and what was trained here since (row 2: +0.5) is kept.
        let table = Tensor::from_slice(&base[..6]).view([3, 2]);
        let sums = Tensor::from_slice(&base[6..]).view([3, 2]);
        let _ = table.get(2).f_add_scalar_(0.5).unwrap();
        let changes = Changes {
            rows: [a.rows, b.rows].concat(),
            deltas: [a.deltas, b.deltas].concat(),
        };
        add_rows(
            &[table.shallow_clone(), sums.shallow_clone()],
            shape,
            &changes,
        )
        .unwrap();
        let values = |t: &Tensor| Vec::<f32>::try_from(t.view(-1)).unwrap();
        assert_eq!(values(&table), vec![1.25, 0.5, 2.0, 2.0, 3.5, 4.5]);
        assert_eq!(values(&sums), vec![4.5, 0.5, 0.5, 0.5, 0.5, 2.5]);
        // Nothing written: only the flag crosses.
        assert_eq!(shape.changes(&base, (&[], &[]), false, None).0, vec![0]);
    }

    #[test]
    fn encoded_changes_cross_within_the_codecs_bound_and_a_final_round_settles_them() {
        let shape = Shape {
            rows: 4,
            width: 3,
            blocks: 1,
        };
        let base = vec![0f32; 12];
        let now = [0.1f32, -0.2, 0.3, 0.0, 0.0, 0.0, 5.0, 1.0, -7.0];
        let mut int8: Box<dyn Codec> = Box::new(Int8);
        let (words, plain) = shape.changes(&base, (&[0, 1, 3], &now), false, Some(&mut int8));
        // Two changed rows: flags, count, 2 indices, byte count, 6 bytes and
        // a 4-byte scale (2 + 1 words), against 1 + 2 × 4 unencoded.
        assert_eq!((plain, words.len()), (9, 2 + 2 + 1 + 3));
        let (done, changes) = shape.parse(&words, Some(&mut int8)).unwrap();
        assert!(!done);
        assert_eq!(changes.rows, vec![0, 3]);
        let sent = [0.1f32, -0.2, 0.3, 5.0, 1.0, -7.0];
        let step = 7.0 / 127.0;
        for (d, x) in changes.deltas.iter().zip(sent) {
            assert!((d - x).abs() <= step / 2.0 + 1e-6, "{d} for {x}");
        }
        // The base takes what was decoded; a last round sends the rest as is.
        let mut after = base.clone();
        for (&row, deltas) in changes.rows.iter().zip(changes.deltas.chunks(3)) {
            after[row * 3..row * 3 + 3].copy_from_slice(deltas);
        }
        let table = [0.1f32, -0.2, 0.3, 5.0, 1.0, -7.0];
        let (last, _) = shape.changes(&after, (&[0, 3], &table), true, None);
        let (done, rest) = shape.parse(&last, None).unwrap();
        assert!(done);
        for (&row, deltas) in rest.rows.iter().zip(rest.deltas.chunks(3)) {
            for (at, d) in (row * 3..).zip(deltas) {
                after[at] += d;
            }
        }
        assert_eq!(&after[..3], &table[..3]);
        assert_eq!(&after[9..], &table[3..]);
    }

    #[test]
    fn only_the_rows_asked_for_are_read_row_after_row() {
        let shape = Shape {
            rows: 3,
            width: 2,
            blocks: 2,
        };
        let table = Tensor::from_slice(&[0f32, 1., 2., 3., 4., 5.]).view([3, 2]);
        let sums = Tensor::from_slice(&[10f32, 11., 12., 13., 14., 15.]).view([3, 2]);
        let now = read_rows(&[table, sums], shape, &[2, 0]).unwrap();
        assert_eq!(now, vec![4.0, 5.0, 14.0, 15.0, 0.0, 1.0, 10.0, 11.0]);
    }

    #[test]
    fn malformed_changes_are_refused() {
        let shape = Shape {
            rows: 2,
            width: 1,
            blocks: 1,
        };
        assert!(shape.parse(&[], None).is_err());
        assert!(shape
            .parse(&[0, 1], None)
            .unwrap_err()
            .contains("not a whole row"));
        assert!(shape
            .parse(&[0, 7, 0], None)
            .unwrap_err()
            .contains("row 7 of 2"));
        // Encoded: without a codec here, rows out of range, bytes missing.
        assert!(shape
            .parse(&[CODED, 0, 0], None)
            .unwrap_err()
            .contains("no codec"));
        let mut int8: Box<dyn Codec> = Box::new(Int8);
        let mut parse = |words: &[u32]| shape.parse(words, Some(&mut int8)).unwrap_err();
        assert!(parse(&[CODED, 1, 5, 0]).contains("row 5 of 2"));
        assert!(parse(&[CODED, 1, 0, 9]).contains("9 bytes in 0 words"));
    }
}
