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
use shadowsync::Registry;
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.data.synthetic.train_rows = 200_000;
    config.data.synthetic.test_rows = 20_000;
    // The default Adagrad at the dense rate of the built-in experiments (twice
    // the default's).
    config.optim.dense_lr = 0.02;
    let data = SyntheticData::ensure(
        config.data.synthetic.spec(),
        &config.data.synthetic.directory(),
    )?;
    let layout = config.table_layout()?;

    // Three trainers, sharing one embedding table, each taking the next
    // batch of the pass when it is ready.
    let mut pipeline_config = PipelineConfig::default();
    pipeline_config.shards = 3;
    pipeline_config.policy = config.data.bad_lines;
    let mut pipeline = Pipeline::spawn(&data.train, layout.clone(), &pipeline_config)?;
    let registry = Registry::default(); // the built-in models and row optimizers
    let table = registry.local_table(&config, &layout)?;
    let learners =
        CtrLearner::replicas(registry.models(), &config, &table, pipeline.take_shards())?;

    let mut cluster_config = ClusterConfig::default();
    cluster_config.sync.algorithm = "shadow-bmuf".parse()?;
    let cluster = Cluster::start(cluster_config, learners)?;

    // Steer it: halve the learning rate after two seconds, pause for one.
    std::thread::sleep(Duration::from_secs(2));
    cluster.set_learning_rate(config.optim.dense_lr / 2.0);
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

    // Evaluate the trained model (the mean of the replicas) with the shared table.
    let (test, _) = load_batches(&data.test, &layout, config.data.bad_lines, 8192)?;
    let model = &outcome.learners[0];
    model.dense_params().load_from(&outcome.model()?)?;
    let (predictions, labels) = model.predict_all(&test)?;
    println!(
        "test NE of the averaged model: {:.4}",
        evaluate(&predictions, &labels).ne
    );
    Ok(())
}
