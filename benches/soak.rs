//! Soak: many trainers (least squares, random groups of 4) for a long run,
//! printing resident memory over time and the sync accounting.
//!
//! ```sh
//! ./dev bench soak     # SHADOWSYNC_SOAK_TRAINERS (64), _SECS (600), _ALGORITHM (shadow-ma)
//! ```

use std::time::Duration;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(key) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{key}: cannot read {v:?}")),
        Err(_) => Ok(default),
    }
}

fn main() -> anyhow::Result<()> {
    let trainers = env_or("SHADOWSYNC_SOAK_TRAINERS", 64usize)?;
    let seconds = env_or("SHADOWSYNC_SOAK_SECS", 600u64)?;
    let algorithm = env_or("SHADOWSYNC_SOAK_ALGORITHM", "shadow-ma".to_string())?;
    eprintln!("soak: {trainers} trainers, {algorithm}, {seconds} s ...");
    let report =
        shadowsync_testkit::runtime::soak(trainers, &algorithm, Duration::from_secs(seconds));
    println!("\nsoak: {trainers} trainers, {algorithm}, random groups of 4, {seconds} s");
    println!("{:>8} {:>12}", "seconds", "resident MB");
    let every = (report.memory.len() / 20).max(1);
    for (t, mb) in report.memory.iter().step_by(every) {
        println!("{t:>8.0} {mb:>12.1}");
    }
    let warm = report
        .memory
        .get(report.memory.len() / 4)
        .map_or(0.0, |m| m.1);
    let peak = report
        .memory
        .iter()
        .skip(report.memory.len() / 4)
        .map(|m| m.1)
        .fold(0.0, f64::max);
    println!("resident memory after warm-up: {warm:.1} MB, peak after: {peak:.1} MB");
    println!(
        "steps {}, syncs counted {}, sync events received {} (from the subscription on), \
         rounds missing {}, trainers whose count is not their last round + 1: {}, \
         events dropped {}, trainers active {}/{trainers}, stop took {:.2} s, errors {}",
        report.steps,
        report.syncs,
        report.synced_events,
        report.rounds_missing,
        report.counts_unmatched,
        report.events_dropped,
        report.active_trainers,
        report.stop_took.as_secs_f64(),
        report.errors.len()
    );
    let accounted =
        report.rounds_missing == 0 && report.counts_unmatched == 0 && report.events_dropped == 0;
    println!(
        "every sync accounted for: {}",
        if accounted { "yes" } else { "NO" }
    );
    Ok(())
}
