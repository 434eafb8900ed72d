//! Reading off the trainers' threads: reader → parsers → the consumers'
//! bounded channels.
//!
//! The file is cut into chunks of `batch_size` lines, numbered from 0 over the
//! whole job's pass. How they reach the consumers is the [`Dealing`]:
//!
//! * **Shared** (the default): one reader reads the file once and sends each
//!   chunk of this process down one channel that every parser takes from;
//!   every parser sends its batches down one channel that every consumer
//!   takes from. Each batch goes to whoever asks first, so a fast consumer
//!   trains more of the pass and a slow one less, consumers may come and go
//!   (an elastic run's trainers), and the pass is still trained once. Each
//!   [`Batch::chunk`] is its chunk's number in the pass; the consumers mark
//!   what they trained in the pipeline's [`ChunkLedger`]. In a job of many
//!   processes, each process's reader asks the job's [`ChunkDealer`] for its
//!   next few chunks whenever it has read those it holds, and reads past the
//!   others': a slow process takes fewer.
//! * **Static**: chunk `k` goes to shard `k % shards`, whose parser sends it
//!   down its shard's own channel, so every consumer sees its own
//!   1/`shards` of one pass, in a deterministic order. A plain regular file
//!   gets a reader thread per shard (up to [`MAX_READERS`]; beyond, shard
//!   `s` shares reader `s mod MAX_READERS`), which reads the whole file and
//!   keeps its own chunks (reading past the others' costs a scan for line
//!   ends): a consumer that is slow or stops reading holds up no other one
//!   of another reader. A pipe, standard input or a gzip file is read once,
//!   by one reader dealing to every shard in turn. Each [`Batch::chunk`] is
//!   its chunk's index within its shard.
//!
//! Bounded channels give backpressure: memory stays flat however large the
//! file.
//!
//! A pipeline can start part-way through a pass ([`PipelineConfig::resume`]):
//! the chunks trained before are read past, unparsed, so a resumed run trains
//! exactly the batches its checkpoint had not: each static shard's first
//! chunks, or the shared pass's [`ChunkSet`].
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
use crate::data::{Batch, ChunkDealer, ChunkLedger, ChunkSet, Dealing, TableLayout};
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

/// Readers of a plain file at most under static dealing: each reads the
/// whole file (scanning past the others' chunks costs about 0.16 µs a line,
/// 0.2% of a trainer's step with logistic regression on this machine);
/// beyond, trainers share them.
const MAX_READERS: usize = 16;

/// Parsers at most under shared dealing, where any parser serves any
/// consumer: parsing a batch costs about 1% of a DLRM step.
const MAX_SHARED_PARSERS: usize = 16;

/// How long a stopped pipeline waits for its reader, which a stalled input
/// can hold in a read (it notices the stop within a [`POLL`] otherwise).
const READER_GRACE: Duration = Duration::from_secs(1);

/// A consumer's end of the pipeline: the batches of its shard (or, shared,
/// of the whole pass). Cloned, it is another consumer of the same batches.
#[derive(Debug, Clone)]
pub struct Batches {
    batches: Receiver<Result<Batch>>,
    ledger: Option<ChunkLedger>,
}

impl Batches {
    /// The next batch, waiting for it; `None` once the pass is over.
    pub fn recv(&self) -> Option<Result<Batch>> {
        self.batches.recv().ok()
    }

    /// The next batch if one is ready.
    pub fn try_recv(&self) -> Option<Result<Batch>> {
        self.batches.try_recv().ok()
    }

    /// The next batch, waiting at most `timeout` for it.
    ///
    /// # Errors
    ///
    /// None came in time ([`RecvTimeoutError::Timeout`]), or the pass is
    /// over ([`RecvTimeoutError::Disconnected`]).
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> std::result::Result<Result<Batch>, RecvTimeoutError> {
        self.batches.recv_timeout(timeout)
    }

    /// Says that `batch` is trained: under shared dealing its chunk is
    /// marked in the ledger a checkpoint keeps (static dealing keeps each
    /// consumer's position instead).
    pub fn trained(&self, batch: &Batch) {
        if let Some(ledger) = &self.ledger {
            ledger.mark(batch.chunk);
        }
    }
}

impl IntoIterator for Batches {
    type Item = Result<Batch>;
    type IntoIter = crossbeam_channel::IntoIter<Result<Batch>>;

    /// Every batch, in the order they come, until the pass is over.
    fn into_iter(self) -> Self::IntoIter {
        self.batches.into_iter()
    }
}

/// Where a pipeline starts in its pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Resume {
    /// At the beginning.
    #[default]
    Start,
    /// Static dealing: past the first chunks of each kept shard, in order
    /// (none for a shard not listed).
    Skip(Vec<u64>),
    /// Shared dealing: past the chunks of the set.
    Past(ChunkSet),
}

/// How to cut and deal the data.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PipelineConfig {
    /// Examples per batch.
    pub batch_size: usize,
    /// Consumers of the whole job; under static dealing each gets its own
    /// channel and 1/`shards` of the data.
    pub shards: usize,
    /// The shards this process consumes (`None`: all). Under static dealing
    /// the lines of the others are read past unparsed (they are other
    /// processes' part of the pass); under shared dealing it says how many
    /// consumers there are here, and the `dealer` which chunks are this
    /// process's.
    pub keep: Option<Range<usize>>,
    /// Under shared dealing, who deals the chunks among the job's processes
    /// (`None`: every chunk is this process's).
    pub dealer: Option<Arc<dyn ChunkDealer>>,
    /// What to do with malformed lines.
    pub policy: BadLinePolicy,
    /// Batches buffered per consumer, up to 16 consumers' worth in all.
    pub capacity: usize,
    /// How the chunks reach the consumers.
    pub dealing: Dealing,
    /// Where the pass starts.
    pub resume: Resume,
}

impl Default for PipelineConfig {
    /// Batches of 128 to one consumer, dealt shared, 64 buffered, a
    /// malformed line an error.
    fn default() -> Self {
        Self {
            batch_size: 128,
            shards: 1,
            keep: None,
            policy: BadLinePolicy::Fail,
            capacity: 64,
            dealing: Dealing::Shared,
            dealer: None,
            resume: Resume::Start,
        }
    }
}

/// A chunk of consecutive raw lines.
struct Chunk {
    /// Its number in the pass (shared) or index within its shard (static).
    index: u64,
    first_line: u64,
    bytes: Vec<u8>,
    /// The lines longer than [`criteo::MAX_LINE_BYTES`], by number: each is
    /// an empty line in `bytes`, and malformed.
    too_long: Vec<u64>,
}

/// The running pipeline: take the consumers' receivers, then `finish`.
#[must_use = "a Pipeline reads in the background: keep it and `finish` it to learn how the read went"]
pub struct Pipeline {
    shards: Vec<Batches>,
    ledger: Option<ChunkLedger>,
    stop: Arc<AtomicBool>,
    readers: Vec<JoinHandle<()>>,
    /// Lines the furthest reader has read (whole chunks).
    lines: Arc<AtomicU64>,
    parsers: Vec<JoinHandle<ReadStats>>,
}

/// Where a reader sends the chunks it reads.
enum Route {
    /// Chunk `k` to shard `k % senders.len()` as its `k / len`-th, if this
    /// reader holds its sender and it is not skipped.
    Static {
        senders: Vec<Option<Sender<Result<Chunk>>>>,
        skip: Vec<u64>,
    },
    /// This process's chunks not yet trained to the one channel, as `k`:
    /// those of its `lease` from the `dealer` (every chunk without one).
    Shared {
        sender: Sender<Result<Chunk>>,
        dealer: Option<Arc<dyn ChunkDealer>>,
        lease: Range<u64>,
        done: ChunkSet,
    },
}

/// Chunks a process asks the dealer for at a time, per consumer: few, since
/// a chunk dealt to a process is one no other can take.
const LEASE_PER_CONSUMER: u64 = 2;

impl Route {
    /// Makes sure the route knows whether chunk `k` is this process's:
    /// under a dealer, once the reader has come past the chunks dealt to it,
    /// asks for the next ones.
    ///
    /// # Errors
    ///
    /// A dealer that cannot be reached, or one that dealt chunks the reader
    /// has passed.
    fn lease(&mut self, k: u64, consumers: usize) -> Result<()> {
        if let Route::Shared {
            dealer: Some(dealer),
            lease,
            done,
            ..
        } = self
        {
            if k >= lease.end {
                let count = LEASE_PER_CONSUMER * consumers.max(1) as u64;
                let dealt = dealer.deal(k.max(done.below), count)?;
                if dealt.start < k || dealt.is_empty() {
                    return Err(Error::Pipeline(
                        "the dealer dealt chunks the reader has passed",
                    ));
                }
                *lease = dealt;
            }
        }
        Ok(())
    }

    /// Where chunk `k` goes (`None`: read past it) and its index there.
    fn of(&self, k: u64) -> (Option<&Sender<Result<Chunk>>>, u64) {
        match self {
            Route::Static { senders, skip } => {
                let shard = (k % senders.len() as u64) as usize;
                let index = k / senders.len() as u64;
                let skipped = index < skip.get(shard).copied().unwrap_or(0);
                (senders[shard].as_ref().filter(|_| !skipped), index)
            }
            Route::Shared {
                sender,
                lease,
                done,
                ..
            } => (
                Some(sender).filter(|_| lease.contains(&k) && !done.contains(k)),
                k,
            ),
        }
    }

    /// A consumer to tell of a read error: any one here.
    fn any(&self) -> Option<&Sender<Result<Chunk>>> {
        match self {
            Route::Static { senders, .. } => senders.iter().flatten().next(),
            Route::Shared { sender, .. } => Some(sender),
        }
    }
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
        let keep = config.keep.clone().unwrap_or(0..config.shards);
        if keep.is_empty() || keep.end > config.shards {
            return Err(Error::config(
                "train.trainers",
                format!("shards {keep:?} to keep out of {}", config.shards),
            ));
        }
        let mut pipeline = Self {
            shards: Vec::new(),
            ledger: None,
            stop: Arc::new(AtomicBool::new(false)),
            readers: Vec::new(),
            lines: Arc::new(AtomicU64::new(0)),
            parsers: Vec::new(),
        };
        let parser = Parser {
            path: path.to_path_buf(),
            layout: Arc::new(layout),
            policy: config.policy,
            stop: Arc::clone(&pipeline.stop),
            ledger: None,
        };
        let consumers = keep.len();
        let routes = match config.dealing {
            Dealing::Shared => pipeline.shared(parser, keep, config)?,
            Dealing::Static => pipeline.dealt_statically(parser, keep, config, path)?,
        };
        for mut route in routes {
            let input = criteo::open(path)?;
            let path = path.to_path_buf();
            let (stop, lines) = (Arc::clone(&pipeline.stop), Arc::clone(&pipeline.lines));
            let cut = Cut {
                lines_per_chunk: config.batch_size,
                consumers,
            };
            pipeline.readers.push(
                std::thread::Builder::new()
                    .name("read".into())
                    .spawn(move || read_chunks(&path, input, cut, &mut route, &stop, &lines))
                    .map_err(|error| thread_refused("data reader", error))?,
            );
        }
        Ok(pipeline)
    }

    /// Shared dealing: one route of every kept chunk to parsers that all
    /// take from one channel and send down one.
    fn shared(
        &mut self,
        mut parser: Parser,
        keep: Range<usize>,
        config: &PipelineConfig,
    ) -> Result<Vec<Route>> {
        let done = match &config.resume {
            Resume::Past(done) => done.clone(),
            _ => ChunkSet::default(),
        };
        let ledger = ChunkLedger::new(&done);
        parser.ledger = Some(ledger.clone());
        let parsers = keep.len().min(MAX_SHARED_PARSERS);
        let (chunk_tx, chunk_rx) = bounded::<Result<Chunk>>(2 * parsers);
        let (batch_tx, batch_rx) = bounded(config.capacity.max(1) * parsers);
        for p in 0..parsers {
            let (worker, chunks, batches) = (parser.clone(), chunk_rx.clone(), batch_tx.clone());
            self.parsers
                .push(spawn_parser(format!("parse-{p}"), worker, chunks, batches)?);
        }
        let consumer = Batches {
            batches: batch_rx,
            ledger: Some(ledger.clone()),
        };
        self.shards = vec![consumer; keep.len()];
        self.ledger = Some(ledger);
        let lease = match config.dealer {
            Some(_) => 0..0,
            None => 0..u64::MAX,
        };
        Ok(vec![Route::Shared {
            sender: chunk_tx,
            dealer: config.dealer.clone(),
            lease,
            done,
        }])
    }

    /// Static dealing: a parser and a channel per kept shard, and a reader
    /// per shard (up to [`MAX_READERS`]) of a file that can be read again.
    fn dealt_statically(
        &mut self,
        parser: Parser,
        keep: Range<usize>,
        config: &PipelineConfig,
        path: &Path,
    ) -> Result<Vec<Route>> {
        let mut chunk_senders = vec![None; config.shards];
        // In all, as many batches as shared dealing's parsers buffer: a
        // thousand shards of 64 each would hold gigabytes.
        let capacity = config.capacity.max(1);
        let per_shard = (capacity * MAX_SHARED_PARSERS / keep.len().max(1)).clamp(1, capacity);
        for shard in keep.clone() {
            let (chunk_tx, chunk_rx) = bounded::<Result<Chunk>>(2);
            let (batch_tx, batch_rx) = bounded(per_shard);
            chunk_senders[shard] = Some(chunk_tx);
            self.shards.push(Batches {
                batches: batch_rx,
                ledger: None,
            });
            let worker = parser.clone();
            self.parsers.push(spawn_parser(
                format!("parse-{shard}"),
                worker,
                chunk_rx,
                batch_tx,
            )?);
        }
        // Per shard of the file: the kept ones' skips at their places.
        let mut skip = vec![0; config.shards];
        if let Resume::Skip(chunks) = &config.resume {
            for (place, &chunks) in skip[keep.clone()].iter_mut().zip(chunks) {
                *place = chunks;
            }
        }
        let readers = if criteo::rereadable(path)? {
            config.shards.clamp(1, MAX_READERS)
        } else {
            1
        };
        // Reader `r` deals to the kept shards `s` with `s mod readers = r`.
        let mut dealt = vec![vec![None; config.shards]; readers.min(keep.len())];
        for shard in keep {
            let count = dealt.len();
            dealt[shard % count][shard] = chunk_senders[shard].take();
        }
        Ok(dealt
            .into_iter()
            .map(|senders| Route::Static {
                senders,
                skip: skip.clone(),
            })
            .collect())
    }

    /// A handle that stops the threads from elsewhere: within one send timeout
    /// they give up, and each consumer finds its channel closed once it has
    /// drained it.
    pub fn halt_handle(&self) -> PipelineHalt {
        PipelineHalt(Arc::clone(&self.stop))
    }

    /// The consumers' ends, one per kept shard (taken once): clones of one
    /// end under shared dealing.
    pub fn take_shards(&mut self) -> Vec<Batches> {
        std::mem::take(&mut self.shards)
    }

    /// Under shared dealing, the ledger of the chunks trained.
    pub fn ledger(&self) -> Option<&ChunkLedger> {
        self.ledger.as_ref()
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
            Some(what) => Err(Error::Pipeline(what)),
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

/// How a reader cuts its input: lines per chunk, and the consumers of this
/// process its chunks are for.
#[derive(Clone, Copy)]
struct Cut {
    lines_per_chunk: usize,
    consumers: usize,
}

/// A reader thread: cuts the input into chunks and sends each where `route`
/// says (reading past the others), counting the lines read in `lines` (the
/// furthest reader's).
fn read_chunks(
    path: &Path,
    mut input: Box<dyn BufRead + Send>,
    Cut {
        lines_per_chunk,
        consumers,
    }: Cut,
    route: &mut Route,
    stop: &AtomicBool,
    lines: &AtomicU64,
) {
    let mut line = 0u64;
    for k in 0u64.. {
        if let Err(e) = route.lease(k, consumers) {
            if let Some(consumer) = route.any() {
                send_until_stopped(consumer, Err(e), stop);
            }
            return;
        }
        let (target, index) = route.of(k);
        let mut chunk = Chunk {
            index,
            first_line: line + 1,
            bytes: Vec::with_capacity(lines_per_chunk * 256),
            too_long: Vec::new(),
        };
        let mut taken = 0;
        while taken < lines_per_chunk {
            if target.is_none() {
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
                    if let Some(consumer) = target.or(route.any()) {
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
        if let Some(consumer) = target {
            if !send_until_stopped(consumer, Ok(chunk), stop) {
                return;
            }
        }
    }
}

/// Starts a parser thread named `name`.
fn spawn_parser(
    name: String,
    worker: Parser,
    chunks: Receiver<Result<Chunk>>,
    batches: Sender<Result<Batch>>,
) -> Result<JoinHandle<ReadStats>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || worker.run(chunks, batches))
        .map_err(|error| thread_refused("data parser", error))
}

/// A pipeline thread the OS would not start: the runtime's
/// [`Thread`](shadowsync_actors::Error::Thread) error, which says the same of its own.
fn thread_refused(thread: &'static str, error: std::io::Error) -> Error {
    shadowsync_actors::Error::Thread { thread, error }.into()
}

/// A parser thread's state.
#[derive(Clone)]
struct Parser {
    path: PathBuf,
    layout: Arc<TableLayout>,
    policy: BadLinePolicy,
    stop: Arc<AtomicBool>,
    /// Shared dealing: where a chunk whose every line was skipped is marked
    /// done (no consumer will see it).
    ledger: Option<ChunkLedger>,
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
            if let Ok(empty) = batch.as_ref() {
                if empty.is_empty() {
                    // Every line of the chunk was skipped: nothing to train.
                    if let Some(ledger) = &self.ledger {
                        ledger.mark(empty.chunk);
                    }
                    continue;
                }
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
            let parsed = if chunk.too_long.contains(&number) {
                Err(criteo::too_long(&self.path, number))
            } else {
                parse_line(line).map_err(|e| e.at(&self.path, number))
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
