//! All-reduce bandwidth across MPI ranks against memcpy bandwidth on this
//! machine (feature `mpi`; run under mpirun, e.g. through `./dev mpi-bench`):
//!
//! ```sh
//! cargo build --release --features mpi --example allreduce_bandwidth
//! mpirun --allow-run-as-root --oversubscribe -np 2 target/release/examples/allreduce_bandwidth
//! ```
//!
//! Rank 0 prints one line per vector size: the mean of `Fabric::average`
//! (an `MPI_Iallreduce` on the communication thread, as the table sync uses)
//! and of a memcpy of the same vector, as GB/s of the vector's bytes.

use anyhow::Result;
use shadowsync::runtime::sync::mpi::MpiNode;
use shadowsync::runtime::sync::Fabric;
use std::time::{Duration, Instant};

const REPEATS: usize = 20;

fn main() -> Result<()> {
    let node = MpiNode::start(Some(Duration::from_secs(120)))?;
    for megabytes in [1usize, 4, 16, 64] {
        let len = megabytes << 18; // f32 values
        let mut values: Vec<f32> = (0..len).map(|i| (i % 1000) as f32).collect();
        node.average(&mut values)?; // warm-up
        let started = Instant::now();
        for _ in 0..REPEATS {
            node.average(&mut values)?;
        }
        let allreduce = started.elapsed().as_secs_f64() / REPEATS as f64;
        let mut copy = vec![0f32; len];
        let started = Instant::now();
        for _ in 0..REPEATS {
            copy.copy_from_slice(std::hint::black_box(&values));
        }
        let memcpy = started.elapsed().as_secs_f64() / REPEATS as f64;
        std::hint::black_box(&copy);
        if node.rank() == 0 {
            let gbs = |seconds: f64| (len * 4) as f64 / seconds / 1e9;
            println!(
                "allreduce ranks={} MB={megabytes} allreduce_GBps={:.3} memcpy_GBps={:.3} ratio={:.4}",
                node.ranks(),
                gbs(allreduce),
                gbs(memcpy),
                memcpy / allreduce
            );
        }
    }
    node.finish()?;
    Ok(())
}
