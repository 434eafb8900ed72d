//! The data layer on real files: the shared Criteo samples, gzip, malformed
//! files under both policies, and the sharding pipeline.

mod common;

use common::sample;
use crossbeam_channel::RecvTimeoutError;
use flate2::{write::GzEncoder, Compression};
use shadowsync::data::{
    BadLinePolicy, Batch, Batches, ChunkDealer, ChunkSet, CriteoReader, Dealing, Example, Pipeline,
    PipelineConfig, Resume, SyntheticData, SyntheticSpec, TableLayout,
};
use shadowsync::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

fn read_all(path: &Path) -> Vec<Example> {
    CriteoReader::open(path, BadLinePolicy::Fail)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn the_real_criteo_samples_parse_with_their_documented_label_counts() {
    // Counts from tests/data/README.md (an independent tally of the files).
    for (file, negatives, positives) in [
        ("criteo_kaggle_paddlerec_train100.tsv", 71, 29),
        ("criteo_kaggle_paddlerec_test100.tsv", 64, 36),
        ("criteo_paddlerec_part0_100.tsv", 71, 29),
    ] {
        let examples = read_all(&sample(file));
        let clicks = examples.iter().filter(|e| e.label == 1.0).count();
        assert_eq!(
            (examples.len() - clicks, clicks),
            (negatives, positives),
            "{file}"
        );
    }
}

#[test]
fn trimmed_lines_and_no_final_newline_read_as_missing_values() {
    let path = sample("criteo_kaggle_paddlerec_test100.tsv");
    let text = std::fs::read(&path).unwrap();
    assert_ne!(text.last(), Some(&b'\n'));
    let examples = read_all(&path);
    // The short lines (37 or 38 fields) end in missing categoricals: 0.
    for (line, example) in text.split(|&b| b == b'\n').zip(&examples) {
        let fields = line.split(|&b| b == b'\t').count();
        for missing in fields.saturating_sub(14)..26 {
            assert_eq!(example.sparse[missing], 0);
        }
    }
}

#[test]
fn gzip_and_plain_files_read_the_same_and_crlf_is_tolerated() {
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(sample("criteo_paddlerec_part0_100.tsv")).unwrap();
    let gz_path = dir.path().join("part.tsv.anything");
    let mut gz = GzEncoder::new(
        std::fs::File::create(&gz_path).unwrap(),
        Compression::fast(),
    );
    gz.write_all(&plain).unwrap();
    gz.finish().unwrap();
    let crlf_path = dir.path().join("crlf.tsv");
    let crlf: Vec<u8> = String::from_utf8(plain)
        .unwrap()
        .replace('\n', "\r\n")
        .into_bytes();
    std::fs::write(&crlf_path, crlf).unwrap();
    let expected = read_all(&sample("criteo_paddlerec_part0_100.tsv"));
    assert_eq!(read_all(&gz_path), expected);
    assert_eq!(read_all(&crlf_path), expected);
}

/// A copy of a real file with line 7 broken in field I3.
fn malformed_file(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(sample("criteo_paddlerec_part0_100.tsv")).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut fields: Vec<&str> = lines[6].split('\t').collect();
    fields[3] = "12x";
    lines[6] = fields.join("\t");
    let path = dir.join("bad.tsv");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
fn a_malformed_line_fails_naming_file_line_field_and_text_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = malformed_file(dir.path());
    let err = CriteoReader::open(&path, BadLinePolicy::Fail)
        .unwrap()
        .find_map(Result::err)
        .unwrap();
    let message = err.to_string();
    assert!(
        message.contains("bad.tsv:7:")
            && message.contains("field 4 (I3)")
            && message.contains("\"12x\""),
        "{message}"
    );
    let mut reader = CriteoReader::open(&path, BadLinePolicy::Skip).unwrap();
    assert_eq!(reader.by_ref().count(), 99);
    assert_eq!(reader.stats().skipped, 1);
    assert_eq!(reader.stats().lines, 100);
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let err = CriteoReader::open("/nonexistent/day_0.tsv", BadLinePolicy::Fail)
        .err()
        .unwrap();
    assert!(matches!(err, Error::Io { .. }));
    assert!(
        err.to_string().starts_with("/nonexistent/day_0.tsv: "),
        "{err}"
    );
}

/// `rows` planted training rows (and one test row) in `dir`.
fn synthetic(dir: &Path, rows: u64, seed: u64) -> SyntheticData {
    let spec = SyntheticSpec {
        train_rows: rows,
        test_rows: 1,
        seed,
        profile: Default::default(),
    };
    SyntheticData::generate(spec, dir).unwrap()
}

fn labels_of(batch: &Batch) -> Vec<f32> {
    Vec::<f32>::try_from(&batch.labels).unwrap()
}

/// Batches of `batch_size` in fixed shares to `shards` consumers, 2 buffered.
fn fixed_shares(batch_size: usize, shards: usize) -> PipelineConfig {
    let mut config = PipelineConfig::default();
    config.batch_size = batch_size;
    config.shards = shards;
    config.capacity = 2;
    config.dealing = Dealing::Static;
    config
}

/// Each shard's batches as (chunk index within the shard, labels).
fn drain(data: &Path, skip: Vec<u64>) -> Vec<Vec<(u64, Vec<f32>)>> {
    let mut config = fixed_shares(64, 3);
    config.resume = Resume::Skip(skip);
    let mut pipeline = Pipeline::spawn(data, TableLayout::uniform(1000).unwrap(), &config).unwrap();
    let shards = pipeline.take_shards();
    let batches = std::thread::scope(|s| {
        let handles: Vec<_> = shards
            .into_iter()
            .map(|rx| {
                s.spawn(move || {
                    rx.into_iter()
                        .map(|b| b.map(|b| (b.chunk, labels_of(&b))).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(pipeline.finish().unwrap().lines, 1000, "every line is read");
    batches
}

#[test]
fn a_pipeline_started_part_way_gives_each_shard_the_rest_of_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 9);
    // 16 chunks of 64 lines (the last of 40): 6, 5 and 5 per shard.
    let whole = drain(&data.train, Vec::new());
    let counts: Vec<usize> = whole.iter().map(Vec::len).collect();
    assert_eq!(counts, [6, 5, 5]);
    for shard in &whole {
        let indices: Vec<u64> = shard.iter().map(|(chunk, _)| *chunk).collect();
        assert_eq!(indices, (0..shard.len() as u64).collect::<Vec<_>>());
    }
    // Shard 0 had trained 2 chunks, shard 1 none, shard 2 all of its own.
    let rest = drain(&data.train, vec![2, 0, u64::MAX]);
    assert_eq!(rest[0], whole[0][2..]);
    assert_eq!(rest[1], whole[1]);
    assert!(rest[2].is_empty());
}

#[test]
fn the_pipeline_deals_every_example_exactly_once_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 5);
    let layout = TableLayout::uniform(1000).unwrap();
    let config = fixed_shares(64, 3);
    let mut pipeline = Pipeline::spawn(&data.train, layout.clone(), &config).unwrap();
    let shards = pipeline.take_shards();
    // Drain the shards concurrently, as trainers would.
    let per_shard: Vec<Vec<Batch>> = std::thread::scope(|s| {
        let handles: Vec<_> = shards
            .into_iter()
            .map(|rx| s.spawn(move || rx.into_iter().map(Result::unwrap).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = pipeline.finish().unwrap();
    assert_eq!((stats.lines, stats.skipped), (1000, 0));
    let sizes: Vec<usize> = per_shard
        .iter()
        .map(|b| b.iter().map(Batch::len).sum())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 1000);
    assert!(sizes.iter().all(|&n| (320..=360).contains(&n)), "{sizes:?}");
    // Chunk k goes to shard k % 3: interleaving the shards' batches restores the file.
    let all: Vec<Example> = CriteoReader::open(&data.train, BadLinePolicy::Fail)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected = Batch::from_examples(&all, &layout).unwrap();
    let mut interleaved = Vec::new();
    for k in 0..per_shard.iter().map(Vec::len).max().unwrap() {
        for shard in &per_shard {
            if let Some(batch) = shard.get(k) {
                interleaved.extend(labels_of(batch));
            }
        }
    }
    assert_eq!(interleaved, labels_of(&expected));
}

/// The chunks trained before a stop and after the resume are each of the
/// pass's 63 once.
fn assert_each_of_63_chunks_once(before: &[u64], after: &[Vec<u64>]) {
    let mut all: Vec<u64> = before
        .iter()
        .chain(after.iter().flatten())
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..63).collect::<Vec<_>>(), "each chunk trained once");
}

/// Drains `shards` concurrently, consumer 0 sleeping `slow` per batch; each
/// consumer marks its batches trained until `stop_after` are marked in all,
/// then takes one more unmarked (as a trainer's prefetched batch) and stops.
/// The chunks each consumer marked.
fn train_shared(shards: Vec<Batches>, slow: Duration, stop_after: usize) -> Vec<Vec<u64>> {
    let marked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (shards.into_iter().enumerate())
            .map(|(i, consumer)| {
                let marked = &marked;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while let Some(batch) = consumer.recv() {
                        let batch = batch.unwrap();
                        if i == 0 {
                            std::thread::sleep(slow);
                        }
                        if marked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= stop_after {
                            break;
                        }
                        consumer.trained(&batch);
                        mine.push(batch.chunk);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn shared_dealing_gives_each_chunk_once_to_whoever_asks_and_resumes_past_what_was_trained() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 7);
    let layout = TableLayout::uniform(1000).unwrap();
    // 63 chunks of 16 lines (the last of 8), 3 consumers.
    let mut config = PipelineConfig::default();
    config.batch_size = 16;
    config.shards = 3;
    config.capacity = 2;
    let mut pipeline = Pipeline::spawn(&data.train, layout.clone(), &config).unwrap();
    let ledger = pipeline.ledger().unwrap().clone();
    let first = train_shared(pipeline.take_shards(), Duration::from_millis(20), 30);
    let done = ledger.snapshot();
    pipeline.finish().unwrap();
    let trained: Vec<u64> = first.concat();
    assert_eq!(trained.len(), 30);
    assert!(
        first[0].len() < first[1].len() + first[2].len(),
        "the slow consumer took {} of 30",
        first[0].len()
    );
    for k in 0..63 {
        assert_eq!(done.contains(k), trained.contains(&k), "chunk {k}");
    }
    // Resumed past the set: the chunks it lacks, each once, read in file
    // order (the batches in flight at the stop are among them).
    let mut resumed = config.clone();
    resumed.resume = Resume::Past(done.clone());
    let mut pipeline = Pipeline::spawn(&data.train, layout, &resumed).unwrap();
    let rest = train_shared(pipeline.take_shards(), Duration::ZERO, usize::MAX);
    let read = pipeline.finish().unwrap();
    assert_eq!(read.lines, 1000, "every line read, once, by one reader");
    assert_each_of_63_chunks_once(&trained, &rest);
    assert_eq!(ChunkSet::default().count_below(63), 0);
}

/// A job's dealer in one process: chunks in rising order to whoever asks.
#[derive(Debug, Default)]
struct Counter(std::sync::Mutex<u64>);

impl ChunkDealer for Counter {
    fn deal(&self, from: u64, count: u64) -> shadowsync::Result<std::ops::Range<u64>> {
        let mut undealt = self.0.lock().unwrap();
        let first = (*undealt).max(from);
        *undealt = first + count;
        Ok(first..first + count)
    }
}

/// Two pipelines as two processes of a job, their chunks dealt by one
/// dealer, one consumer each, one of them slow: what each trained, the
/// union of their ledgers, the lines each read.
fn two_processes(
    train: &Path,
    config: &PipelineConfig,
    done: &ChunkSet,
    slow: Duration,
    stop_after: usize,
) -> (Vec<Vec<u64>>, ChunkSet, Vec<u64>) {
    let dealer: Arc<dyn ChunkDealer> = Arc::new(Counter::default());
    let mut config = config.clone();
    config.dealer = Some(dealer);
    config.resume = Resume::Past(done.clone());
    let layout = TableLayout::uniform(1000).unwrap();
    let mut pipelines: Vec<Pipeline> = (0..2)
        .map(|_| Pipeline::spawn(train, layout.clone(), &config).unwrap())
        .collect();
    let ledgers: Vec<_> = pipelines
        .iter()
        .map(|p| p.ledger().unwrap().clone())
        .collect();
    let consumers = pipelines
        .iter_mut()
        .flat_map(Pipeline::take_shards)
        .collect();
    let trained = train_shared(consumers, slow, stop_after);
    let sets: Vec<ChunkSet> = ledgers.iter().map(|l| l.snapshot()).collect();
    let lines = pipelines
        .into_iter()
        .map(|p| p.finish().unwrap().lines)
        .collect();
    (trained, ChunkSet::union(&sets), lines)
}

/// Across processes, a dealer gives each chunk to one process, the slow one
/// fewer; each process's ledger holds exactly what its consumers trained, so
/// their union resumes the job past exactly the chunks trained.
#[test]
fn chunks_dealt_across_processes_go_once_each_to_whichever_asks_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 9);
    // 63 chunks of 16 lines (the last of 8).
    let mut config = PipelineConfig::default();
    config.batch_size = 16;
    config.capacity = 1;
    let (first, done, _) = two_processes(
        &data.train,
        &config,
        &ChunkSet::default(),
        Duration::from_millis(20),
        30,
    );
    let trained: Vec<u64> = first.concat();
    assert_eq!(trained.len(), 30);
    assert!(
        first[0].len() < first[1].len(),
        "the slow process trained {} of 30",
        first[0].len()
    );
    for k in 0..63 {
        assert_eq!(done.contains(k), trained.contains(&k), "chunk {k}");
    }
    let (rest, all_done, lines) =
        two_processes(&data.train, &config, &done, Duration::ZERO, usize::MAX);
    assert_eq!(
        lines,
        [1000, 1000],
        "each process reads the whole file, once"
    );
    assert_each_of_63_chunks_once(&trained, &rest);
    assert_eq!(all_done.count_below(63), 63);
}

/// More shards than readers (16): they share them, and still get each of
/// their chunks once, in order.
#[test]
fn twenty_shards_share_the_readers_and_get_each_of_their_chunks_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 8);
    let config = fixed_shares(16, 20);
    let mut pipeline =
        Pipeline::spawn(&data.train, TableLayout::uniform(1000).unwrap(), &config).unwrap();
    let shards = pipeline.take_shards();
    let chunks: Vec<Vec<(u64, usize)>> = std::thread::scope(|s| {
        let handles: Vec<_> = shards
            .into_iter()
            .map(|rx| {
                s.spawn(move || {
                    rx.into_iter()
                        .map(|b| b.map(|b| (b.chunk, b.len())).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(pipeline.finish().unwrap().lines, 1000);
    // 63 chunks (the last of 8 lines): chunk k to shard k mod 20.
    for (shard, got) in chunks.iter().enumerate() {
        let expected: Vec<u64> = (0..).take_while(|i| i * 20 + (shard as u64) < 63).collect();
        let indices: Vec<u64> = got.iter().map(|(chunk, _)| *chunk).collect();
        assert_eq!(indices, expected, "shard {shard}");
    }
    let total: usize = chunks.iter().flatten().map(|(_, n)| n).sum();
    assert_eq!(total, 1000);
}

type Shard = Batches;

/// A pipeline of 2 shards of 16-line batches over `input`, with one consumer
/// that never reads (a stopped or hung trainer): the other's receiver.
fn one_consumer_stopped(input: &Path) -> (Pipeline, Shard, Shard) {
    let config = fixed_shares(16, 2);
    let mut pipeline =
        Pipeline::spawn(input, TableLayout::uniform(1000).unwrap(), &config).unwrap();
    let mut shards = pipeline.take_shards();
    let reading = shards.pop().unwrap();
    let stopped = shards.pop().unwrap(); // held, never read
    (pipeline, reading, stopped)
}

#[test]
fn a_consumer_that_stops_reading_a_file_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 5000, 5);
    let (pipeline, reading, _stopped) = one_consumer_stopped(&data.train);
    let mut received = 0;
    // Its own reader: its half of the file, then its channel closes.
    loop {
        match reading.recv_timeout(Duration::from_secs(30)) {
            Ok(batch) => received += batch.unwrap().len(),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("held up after {received} examples"),
        }
    }
    assert_eq!(received, 2496, "its 156 chunks of the 313");
    pipeline.finish().unwrap();
}

#[test]
fn a_halted_pipeline_closes_every_channel_though_a_consumer_stopped_reading() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 5000, 5);
    // A pipe is read once, by one reader dealing to both consumers.
    let fifo = dir.path().join("train.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let (from, to) = (data.train.clone(), fifo.clone());
        std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new().write(true).open(to).unwrap();
            // Ends with a broken pipe once the halted reader lets go.
            let _ = std::io::copy(&mut std::fs::File::open(from).unwrap(), &mut out);
        })
    };
    let (pipeline, reading, _stopped) = one_consumer_stopped(&fifo);
    let halt = pipeline.halt_handle();
    let mut received = 0;
    let mut halted = false;
    loop {
        match reading.recv_timeout(Duration::from_secs(2)) {
            Ok(batch) => received += batch.unwrap().len(),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) if halted => panic!("still open after the halt"),
            Err(RecvTimeoutError::Timeout) => {
                // The other channel is full and the reader waits on it: only
                // the halt lets this consumer end.
                halt.halt();
                halted = true;
            }
        }
    }
    assert!(halted, "the channel closed by itself");
    assert!(
        received < 2500,
        "{received} examples: the other consumer was not held up"
    );
    pipeline.finish().unwrap();
    writer.join().unwrap();
}

#[test]
fn processes_keeping_their_shards_share_one_pass_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = synthetic(dir.path(), 1000, 6);
    let layout = TableLayout::uniform(1000).unwrap();
    let shards_of = |keep: Option<std::ops::Range<usize>>| -> Vec<Vec<f32>> {
        let mut config = fixed_shares(50, 4);
        config.keep = keep;
        let mut pipeline = Pipeline::spawn(&data.train, layout.clone(), &config).unwrap();
        let shards = pipeline.take_shards();
        let labels = std::thread::scope(|s| {
            let handles: Vec<_> = shards
                .into_iter()
                .map(|rx| {
                    s.spawn(move || {
                        rx.into_iter()
                            .flat_map(|b| labels_of(&b.unwrap()))
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Every line is read, whoever parses it.
        assert_eq!(pipeline.finish().unwrap().lines, 1000);
        labels
    };
    let whole = shards_of(None);
    let mut parts = shards_of(Some(0..1));
    parts.extend(shards_of(Some(1..4)));
    assert_eq!(parts, whole);
    assert_eq!(whole.iter().map(Vec::len).sum::<usize>(), 1000);
    let mut outside = fixed_shares(50, 4);
    outside.keep = Some(3..5);
    assert!(Pipeline::spawn(&data.train, layout, &outside).is_err());
}

#[test]
fn the_pipeline_reports_bad_lines_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let path = malformed_file(dir.path());
    let layout = TableLayout::uniform(100).unwrap();
    let run = |policy| {
        let mut config = fixed_shares(16, 1);
        config.policy = policy;
        config.capacity = 4;
        let mut pipeline = Pipeline::spawn(&path, layout.clone(), &config).unwrap();
        let rx = pipeline.take_shards().pop().unwrap();
        let results: Vec<_> = rx.into_iter().collect();
        (results, pipeline.finish().unwrap())
    };
    let (results, _) = run(BadLinePolicy::Fail);
    let err = results
        .into_iter()
        .find_map(Result::err)
        .unwrap()
        .to_string();
    assert!(err.contains("bad.tsv:7: field 4 (I3)"), "{err}");
    let (results, stats) = run(BadLinePolicy::Skip);
    let examples: usize = results.into_iter().map(|b| b.unwrap().len()).sum();
    assert_eq!((examples, stats.skipped, stats.lines), (99, 1, 100));
    assert!(stats.first_skipped[0].contains("bad.tsv:7"));
}
