//! Embedding the runtime in your own program through the cluster handle: build
//! the learners yourself, start a [`Cluster`], steer it while it runs (stats,
//! learning rate, pause/resume), and take the trained learners back.
//!
//! ```sh
//! cargo run --release --example embed_runtime
//! ```

use shadowsync::config::Config;
use shadowsync::data::{Pipeline, PipelineConfig, SyntheticData};
use shadowsync::metrics::evaluate;
use shadowsync::model::CtrLearner;
use shadowsync::runtime::{Cluster, ClusterConfig, Learner};
use shadowsync::train::load_batches;
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.data.synthetic.train_rows = 200_000;
    config.data.synthetic.test_rows = 20_000;
    let data = SyntheticData::ensure(
        config.data.synthetic.spec(),
        &config.data.synthetic.directory(),
    )?;
    let layout = config.table_layout()?;

    // Three trainers on three shards, sharing one embedding table.
    let pipeline_config = PipelineConfig {
        batch_size: 128,
        shards: 3,
        keep: None,
        policy: config.data.bad_lines,
        capacity: 64,
        skip: Vec::new(),
    };
    let mut pipeline = Pipeline::spawn(&data.train, layout.clone(), &pipeline_config)?;
    let learners = CtrLearner::replicas(
        &config.model,
        &config.optim,
        &layout,
        pipeline.take_shards(),
        1,
    )?;

    let mut cluster_config = ClusterConfig::default();
    cluster_config.sync.algorithm = "shadow-bmuf".parse()?;
    let cluster = Cluster::start(cluster_config, learners)?;

    // Steer it: halve the learning rate after two seconds, pause for one.
    std::thread::sleep(Duration::from_secs(2));
    cluster.set_learning_rate(0.05);
    cluster.pause();
    let paused_at: u64 = cluster.stats().iter().map(|s| s.steps).sum();
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "paused at {paused_at} steps; still {} a second later",
        cluster.stats().iter().map(|s| s.steps).sum::<u64>()
    );
    cluster.resume();

    let outcome = cluster.wait()?;
    pipeline.finish()?;
    println!(
        "{} examples at {:.0} examples/s",
        outcome.report.examples, outcome.report.examples_per_sec
    );

    // Evaluate the mean of the replicas with the shared table.
    let (test, _) = load_batches(&data.test, &layout, config.data.bad_lines, 8192)?;
    let len = outcome.learners[0].dense_params().numel();
    let mut mean = vec![0f32; len];
    let mut replica = vec![0f32; len];
    for learner in &outcome.learners {
        learner.dense_params().copy_to(&mut replica)?;
        mean.iter_mut()
            .zip(&replica)
            .for_each(|(m, r)| *m += r / outcome.learners.len() as f32);
    }
    let model = &outcome.learners[0];
    model.dense_params().load_from(&mean)?;
    let (predictions, labels) = model.predict_all(&test)?;
    println!(
        "test NE of the averaged model: {:.4}",
        evaluate(&predictions, &labels).ne
    );
    Ok(())
}
