//! Reading off the trainers' threads: reader → parsers → one bounded channel per
//! consumer.
//!
//! The file is cut into chunks of `batch_size` lines, dealt round-robin to
//! `shards` parser threads (chunk `k` goes to shard `k % shards`). Each parser
//! turns its chunks into [`Batch`]es and sends them down its shard's bounded
//! channel, so every consumer sees its own 1/`shards` of one pass, in a
//! deterministic order, and never waits on parsing while the parsers keep up.
//! Or, with [`PipelineConfig::shared`], every parser sends down one channel
//! that every consumer takes from: each batch goes to whoever asks first, so
//! consumers may come and go (an elastic run's trainers) and the pass is
//! still trained once.
//! Bounded channels give backpressure: memory stays flat however large the
//! file.
//!
//! A plain regular file gets a reader thread per shard (up to
//! [`MAX_READERS`]; beyond, shard `s` shares reader `s mod MAX_READERS`),
//! which reads the whole file and keeps its own chunks (reading past the
//! others' costs a scan for line ends): a consumer that is slow or stops
//! reading holds up no other one of another reader. A pipe, standard input
//! or a gzip file is read once, by one reader dealing to every shard in
//! turn: there a consumer that stops reading holds up the others once its
//! channel is full.
//!
//! A pipeline can start part-way through a pass ([`PipelineConfig::skip`]):
//! each shard's first chunks are read past, unparsed, so a resumed run trains
//! exactly the batches its checkpoint had not (each [`Batch::chunk`] is its
//! chunk's index within the shard).
//!
//! Whoever stops the consumers raises the [`PipelineHalt`] too, and every
//! channel is closed once drained. The parsers give up within a poll, even
//! while the input stalls (a pipe whose writer keeps it open and sends
//! nothing); a reader blocked reading such an input is waited for a moment
//! and then left to end with the process.
//!
//! A malformed line either arrives as an `Err` on its shard (policy `fail`) or is
//! counted (policy `skip`); [`Pipeline::finish`] returns the counts.

use crate::data::criteo::{self, parse_line, BadLinePolicy, Line, ReadStats};
use crate::data::{Batch, TableLayout};
use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use std::io::BufRead;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a blocked thread of the pipeline looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Readers of a plain file at most: each reads the whole file (scanning past
/// the others' chunks costs about 0.16 µs a line, 0.2% of a trainer's step
/// with logistic regression on this machine); beyond, trainers share them.
const MAX_READERS: usize = 16;

/// How long a stopped pipeline waits for its reader, which a stalled input
/// can hold in a read (it notices the stop within a [`POLL`] otherwise).
const READER_GRACE: Duration = Duration::from_secs(1);

/// A consumer's end of the pipeline: the batches of its shard (or, shared,
/// of every shard).
pub type Batches = Receiver<Result<Batch>>;

/// How to cut and deal the data.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Examples per batch.
    pub batch_size: usize,
    /// Number of consumers; each gets its own channel and 1/`shards` of the data.
    pub shards: usize,
    /// The shards this process consumes (`None`: all); the lines of the others
    /// are read past unparsed (they are other processes' part of the pass).
    pub keep: Option<Range<usize>>,
    /// What to do with malformed lines.
    pub policy: BadLinePolicy,
    /// Batches buffered per consumer.
    pub capacity: usize,
    /// Whether every consumer takes from one channel (fed by every parser)
    /// rather than from its shard's.
    pub shared: bool,
    /// Chunks to skip at the start of each kept shard, in order (none for a
    /// shard not listed).
    pub skip: Vec<u64>,
}

/// A chunk of consecutive raw lines.
struct Chunk {
    /// Its index within its shard.
    index: u64,
    first_line: u64,
    bytes: Vec<u8>,
    /// The lines longer than [`criteo::MAX_LINE_BYTES`], by number: each is
    /// an empty line in `bytes`, and malformed.
    too_long: Vec<u64>,
}

/// The running pipeline: take the consumers' receivers, then `finish`.
pub struct Pipeline {
    shards: Vec<Batches>,
    stop: Arc<AtomicBool>,
    readers: Vec<JoinHandle<()>>,
    /// Lines the furthest reader has read (whole chunks).
    lines: Arc<AtomicU64>,
    parsers: Vec<JoinHandle<ReadStats>>,
}

impl Pipeline {
    /// Opens `path` (an error here if it cannot be read) and starts the threads.
    ///
    /// # Errors
    ///
    /// A file that cannot be opened ([`Error::Io`] naming it), or threads that cannot
    /// start.
    pub fn spawn(path: &Path, layout: TableLayout, config: &PipelineConfig) -> Result<Self> {
        if config.batch_size == 0 || config.shards == 0 {
            return Err(Error::config(
                "train.batch_size",
                "batch size and shard count must be at least 1",
            ));
        }
        let readers = match criteo::rereadable(path)? {
            true => config.shards.clamp(1, MAX_READERS),
            false => 1,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let layout = Arc::new(layout);
        let keep = config.keep.clone().unwrap_or(0..config.shards);
        let kept = keep.clone();
        if keep.is_empty() || keep.end > config.shards {
            return Err(Error::config(
                "train.trainers",
                format!("shards {keep:?} to keep out of {}", config.shards),
            ));
        }
        let mut chunk_senders = vec![None; config.shards];
        let mut shards = Vec::with_capacity(keep.len());
        let mut parsers = Vec::with_capacity(keep.len());
        let one_channel = config
            .shared
            .then(|| bounded(config.capacity.max(1) * keep.len()));
        for shard in keep {
            let (chunk_tx, chunk_rx) = bounded::<Result<Chunk>>(2);
            let (batch_tx, batch_rx) = match &one_channel {
                Some((tx, rx)) => (tx.clone(), rx.clone()),
                None => bounded(config.capacity.max(1)),
            };
            chunk_senders[shard] = Some(chunk_tx);
            shards.push(batch_rx);
            let worker = Parser {
                path: path.to_path_buf(),
                layout: Arc::clone(&layout),
                policy: config.policy,
                stop: Arc::clone(&stop),
            };
            parsers.push(
                std::thread::Builder::new()
                    .name(format!("parse-{shard}"))
                    .spawn(move || worker.run(chunk_rx, batch_tx))
                    .map_err(|e| Error::Pipeline(format!("cannot start a parser thread: {e}")))?,
            );
        }
        // Per shard of the file: the kept ones' skips at their places.
        let mut skip = vec![0; config.shards];
        for (place, &chunks) in skip[kept.clone()].iter_mut().zip(&config.skip) {
            *place = chunks;
        }
        // Reader `r` deals to the kept shards `s` with `s mod readers = r`.
        let mut dealt = vec![vec![None; config.shards]; readers.min(kept.len())];
        for shard in kept.clone() {
            let count = dealt.len();
            dealt[shard % count][shard] = chunk_senders[shard].take();
        }
        let lines = Arc::new(AtomicU64::new(0));
        let mut readers = Vec::with_capacity(dealt.len());
        for senders in dealt {
            let input = criteo::open(path)?;
            let (path, skip) = (path.to_path_buf(), skip.clone());
            let (stop, lines) = (Arc::clone(&stop), Arc::clone(&lines));
            let lines_per_chunk = config.batch_size;
            readers.push(
                std::thread::Builder::new()
                    .name("read".into())
                    .spawn(move || {
                        read_chunks(&path, input, lines_per_chunk, &skip, senders, &stop, &lines)
                    })
                    .map_err(|e| Error::Pipeline(format!("cannot start a reader thread: {e}")))?,
            );
        }
        Ok(Self {
            shards,
            stop,
            readers,
            lines,
            parsers,
        })
    }

    /// A handle that stops the threads from elsewhere: within one send timeout
    /// they give up, and each consumer finds its channel closed once it has
    /// drained it.
    pub fn halt_handle(&self) -> PipelineHalt {
        PipelineHalt(Arc::clone(&self.stop))
    }

    /// The consumers' receivers, one per kept shard (taken once): clones of
    /// one receiver when [`PipelineConfig::shared`].
    pub fn take_shards(&mut self) -> Vec<Batches> {
        std::mem::take(&mut self.shards)
    }

    /// Stops the threads (if still running) and returns the read counts.
    ///
    /// # Errors
    ///
    /// A reader or parser thread that failed or panicked: the bad line or read error it
    /// met, named ([`Error::Data`], [`Error::Io`], [`Error::Pipeline`]).
    pub fn finish(mut self) -> Result<ReadStats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<ReadStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.shards.clear();
        let mut stats = ReadStats::default();
        let mut died = None;
        for parser in self.parsers.drain(..) {
            match parser.join() {
                Ok(s) => stats.merge(s),
                Err(_) => died = Some("a parser thread panicked"),
            }
        }
        let since = Instant::now();
        while self.readers.iter().any(|r| !r.is_finished()) && since.elapsed() < READER_GRACE {
            std::thread::sleep(POLL / 10);
        }
        for reader in self.readers.drain(..) {
            // One still blocked reading a stalled input is left to end with
            // the process.
            if reader.is_finished() && reader.join().is_err() {
                died = Some("a reader thread panicked");
            }
        }
        stats.lines = self.lines.load(Ordering::Acquire);
        match died {
            Some(what) => Err(Error::Pipeline(what.into())),
            None => Ok(stats),
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !self.readers.is_empty() {
            let _ = self.shutdown();
        }
    }
}

/// Stops a [`Pipeline`]'s threads (see [`Pipeline::halt_handle`]).
#[derive(Debug, Clone)]
pub struct PipelineHalt(Arc<AtomicBool>);

impl PipelineHalt {
    /// Stops the reader and the parsers.
    pub fn halt(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Sends `item`, giving up when the receiver is gone or `stop` is raised.
fn send_until_stopped<T>(tx: &Sender<T>, mut item: T, stop: &AtomicBool) -> bool {
    loop {
        match tx.send_timeout(item, POLL) {
            Ok(()) => return true,
            Err(SendTimeoutError::Disconnected(_)) => return false,
            Err(SendTimeoutError::Timeout(back)) if !stop.load(Ordering::Relaxed) => item = back,
            Err(SendTimeoutError::Timeout(_)) => return false,
        }
    }
}

/// A reader thread: cuts the input into chunks and deals them to the shards
/// it has a sender of (reading past the others'), past the first `skip[s]` of
/// each shard `s`, counting the lines read in `lines` (the furthest reader's).
fn read_chunks(
    path: &Path,
    mut input: Box<dyn BufRead + Send>,
    lines_per_chunk: usize,
    skip: &[u64],
    senders: Vec<Option<Sender<Result<Chunk>>>>,
    stop: &AtomicBool,
    lines: &AtomicU64,
) {
    let mut line = 0u64;
    for k in 0u64.. {
        let shard = (k % senders.len() as u64) as usize;
        let target = &senders[shard];
        let index = k / senders.len() as u64;
        let skipped = target.is_none() || index < skip.get(shard).copied().unwrap_or(0);
        let mut chunk = Chunk {
            index,
            first_line: line + 1,
            bytes: Vec::with_capacity(lines_per_chunk * 256),
            too_long: Vec::new(),
        };
        let mut taken = 0;
        while taken < lines_per_chunk {
            if skipped {
                chunk.bytes.clear();
                chunk.too_long.clear();
            }
            let number = line + taken as u64 + 1;
            match criteo::read_line(&mut input, &mut chunk.bytes, path, number) {
                Ok(Line::End) => break,
                Ok(Line::Read(_)) => taken += 1,
                Ok(Line::TooLong) => {
                    chunk.bytes.push(b'\n');
                    chunk.too_long.push(number);
                    taken += 1;
                }
                Err(e) => {
                    // To this chunk's consumer, or any consumer here.
                    if let Some(consumer) = target.as_ref().or(senders.iter().flatten().next()) {
                        send_until_stopped(consumer, Err(e), stop);
                    }
                    return;
                }
            }
        }
        line += taken as u64;
        lines.fetch_max(line, Ordering::Release);
        if taken == 0 {
            return;
        }
        if let (Some(consumer), false) = (target, skipped) {
            if !send_until_stopped(consumer, Ok(chunk), stop) {
                return;
            }
        }
    }
}

/// A parser thread's state.
struct Parser {
    path: PathBuf,
    layout: Arc<TableLayout>,
    policy: BadLinePolicy,
    stop: Arc<AtomicBool>,
}

impl Parser {
    fn run(self, chunks: Receiver<Result<Chunk>>, batches: Sender<Result<Batch>>) -> ReadStats {
        let mut stats = ReadStats::default();
        let mut examples = Vec::new();
        loop {
            let chunk = match chunks.recv_timeout(POLL) {
                Ok(chunk) => chunk,
                Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Relaxed) => continue,
                Err(_) => break,
            };
            let batch = chunk.and_then(|c| self.parse_chunk(&c, &mut examples, &mut stats));
            if matches!(&batch, Ok(b) if b.is_empty()) {
                continue; // every line of the chunk was skipped
            }
            let failed = batch.is_err();
            if !send_until_stopped(&batches, batch, &self.stop) || failed {
                break;
            }
        }
        stats
    }

    fn parse_chunk(
        &self,
        chunk: &Chunk,
        examples: &mut Vec<criteo::Example>,
        stats: &mut ReadStats,
    ) -> Result<Batch> {
        examples.clear();
        let body = chunk.bytes.strip_suffix(b"\n").unwrap_or(&chunk.bytes);
        for (number, line) in (chunk.first_line..).zip(body.split(|&b| b == b'\n')) {
            let parsed = match chunk.too_long.contains(&number) {
                true => Err(criteo::too_long(&self.path, number)),
                false => parse_line(line).map_err(|e| e.at(&self.path, number)),
            };
            match (parsed, self.policy) {
                (Ok(example), _) => examples.push(example),
                (Err(error), BadLinePolicy::Fail) => return Err(error),
                (Err(error), BadLinePolicy::Skip) => stats.skip(&error),
            }
        }
        let mut batch = Batch::from_examples(examples, &self.layout)?;
        batch.chunk = chunk.index;
        Ok(batch)
    }
}
