//! Parser benchmark: lines/s on a 1M-line Criteo file, single thread and through
//! the pipeline (reader thread + parser threads + channels, drained like trainers).
//!
//! `cargo bench --bench parser` (criterion prints `thrpt` in lines/s). The file is
//! the cached synthetic training set of `benches/train_step.rs`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shadowsync::config::SyntheticConfig;
use shadowsync::data::{
    BadLinePolicy, CriteoReader, Dealing, Pipeline, PipelineConfig, Resume, SyntheticData,
    TableLayout,
};
use std::path::{Path, PathBuf};

fn data_file() -> PathBuf {
    let synthetic = SyntheticConfig {
        train_rows: 1_000_000,
        test_rows: 200_000,
        ..SyntheticConfig::default()
    };
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

fn read_pipeline(path: &Path, shards: usize) -> usize {
    let config = PipelineConfig {
        batch_size: 128,
        shards,
        keep: None,
        policy: BadLinePolicy::Fail,
        capacity: 64,
        dealing: Dealing::Static,
        resume: Resume::Start,
    };
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
    let mut group = c.benchmark_group("criteo_1M_lines");
    group.sample_size(10);
    group.throughput(Throughput::Elements(lines as u64));
    group.bench_function("single_thread_examples", |b| {
        b.iter(|| read_single_thread(&path))
    });
    for shards in [1, 2, 8] {
        group.bench_function(format!("pipeline_batches_{shards}_shards"), |b| {
            b.iter(|| read_pipeline(&path, shards))
        });
    }
    group.finish();
}

criterion_group!(benches, parser);
criterion_main!(benches);
