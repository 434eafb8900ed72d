//! Codec benchmark: values/s encoded and decoded by each built-in codec of
//! the sync's payloads (`sync.compression`), on a message as long as DLRM's
//! dense parameters.
//!
//! `cargo bench --bench codecs` (criterion prints `thrpt` in values/s, one
//! encode and one decode per value). A shadow round of a group of m moves
//! about 2 (m − 1) / m of the vector each way per member.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shadowsync::runtime::sync::{Codec, Fp16, Int8, TopK};
use std::hint::black_box;

/// About DLRM's default dense parameters.
const LEN: usize = 480_000;

fn values(round: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| ((i * 7919 + round * 104_729) % 20_011) as f32 / 10_000.0 - 1.0)
        .collect()
}

/// Makes a codec for a link whose ends start from the given values.
type Make = fn(&[f32]) -> Box<dyn Codec>;

fn codecs(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(LEN as u64));
    let initial = values(0);
    let made: [(&str, Make); 4] = [
        ("fp16", |_| Box::new(Fp16)),
        ("int8", |_| Box::new(Int8)),
        ("topk-0.1", |initial| {
            Box::new(TopK::new(0.1, initial).unwrap())
        }),
        ("topk-0.01", |initial| {
            Box::new(TopK::new(0.01, initial).unwrap())
        }),
    ];
    for (name, make) in made {
        let (mut sender, mut receiver) = (make(&initial), make(&initial));
        let rounds: Vec<Vec<f32>> = (1..5).map(values).collect();
        let (mut wire, mut out, mut round) = (Vec::new(), vec![0f32; LEN], 0);
        group.bench_function(name, |b| {
            b.iter(|| {
                round = (round + 1) % rounds.len();
                wire.clear();
                sender.encode(0, &rounds[round], &mut wire);
                receiver.decode(0, &wire, &mut out).unwrap();
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, codecs);
criterion_main!(benches);
