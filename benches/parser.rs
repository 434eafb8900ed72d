//! Parser benchmark: lines/s on a 1M-line Criteo file, single thread and through
//! the pipeline (reader thread + parser threads + channels, drained like trainers),
//! its batches dealt in fixed shares (a reader per consumer, up to 16, each
//! reading the whole file) or shared (the file read once). Before the timings it
//! prints the CPU seconds one pass costs 16 consumers each way: what the readers
//! take from the cores the trainers need.
//!
//! `cargo bench --bench parser` (criterion prints `thrpt` in lines/s). The file is
//! the cached synthetic training set of `benches/train_step.rs`.

use cpu_time::ProcessTime;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shadowsync::config::SyntheticConfig;
use shadowsync::data::{
    BadLinePolicy, CriteoReader, Dealing, Pipeline, PipelineConfig, SyntheticData, TableLayout,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn data_file() -> PathBuf {
    let mut synthetic = SyntheticConfig::default();
    synthetic.train_rows = 1_000_000;
    synthetic.test_rows = 200_000;
    match SyntheticData::ensure(synthetic.spec(), &synthetic.directory()) {
        Ok(data) => data.train,
        Err(e) => panic!("cannot make the benchmark data: {e}"),
    }
}

fn read_single_thread(path: &Path) -> usize {
    CriteoReader::open(path, BadLinePolicy::Fail)
        .map(|reader| reader.filter(Result::is_ok).count())
        .unwrap_or(0)
}

fn read_pipeline(path: &Path, shards: usize, dealing: Dealing) -> usize {
    let mut config = PipelineConfig::default();
    config.batch_size = 128;
    config.shards = shards;
    config.dealing = dealing;
    let layout = TableLayout::uniform(100_000).unwrap_or_else(|e| panic!("{e}"));
    let Ok(mut pipeline) = Pipeline::spawn(path, layout, &config) else {
        return 0;
    };
    let receivers = pipeline.take_shards();
    std::thread::scope(|s| {
        let consumers: Vec<_> = receivers
            .into_iter()
            .map(|rx| s.spawn(move || rx.into_iter().flatten().map(|b| b.len()).sum::<usize>()))
            .collect();
        consumers.into_iter().map(|c| c.join().unwrap_or(0)).sum()
    })
}

fn parser(c: &mut Criterion) {
    let path = data_file();
    let lines = read_single_thread(&path);
    assert_eq!(lines, 1_000_000, "benchmark file");
    for dealing in [Dealing::Static, Dealing::Shared] {
        let cpu = ProcessTime::now();
        let wall = Instant::now();
        assert_eq!(read_pipeline(&path, 16, dealing), lines);
        println!(
            "one pass to 16 consumers dealt {dealing:?}: {:.2} CPU s, {:.2} s",
            cpu.elapsed().as_secs_f64(),
            wall.elapsed().as_secs_f64()
        );
    }
    let mut group = c.benchmark_group("criteo_1M_lines");
    group.sample_size(10);
    group.throughput(Throughput::Elements(lines as u64));
    group.bench_function("single_thread_examples", |b| {
        b.iter(|| read_single_thread(&path))
    });
    for (shards, dealing) in [
        (1, Dealing::Static),
        (2, Dealing::Static),
        (8, Dealing::Static),
        (16, Dealing::Static),
        (16, Dealing::Shared),
    ] {
        let name = format!("pipeline_batches_{shards}_consumers_{dealing:?}");
        group.bench_function(name, |b| b.iter(|| read_pipeline(&path, shards, dealing)));
    }
    group.finish();
}

criterion_group!(benches, parser);
criterion_main!(benches);
