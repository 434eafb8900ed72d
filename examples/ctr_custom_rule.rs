//! Your own sync rule and group schedule in a full CTR run, driven by the
//! `shadowsync` command line with every flag and config key.
//!
//! The rule, `median`, syncs each coordinate to its median over the group
//! instead of the mean: one replica that wandered off (a bad shard, a
//! trainer far behind) cannot drag the others. The schedule, `rotating`,
//! forms groups of consecutive trainers, shifted by one every round, so
//! that every trainer meets every other over `n` rounds. Both are
//! registered by name; the binary is then the whole `shadowsync` command
//! line with two more names:
//!
//! ```sh
//! cargo run --release --example ctr_custom_rule            # a small run of its own
//! cargo run --release --example ctr_custom_rule -- train --sync shadow-median \
//!     --schedule rotating --group-size 4 --trainers 8      # any flags, any data
//! ```

use shadowsync::runtime::sync::{GroupSchedule, SyncRule};
use shadowsync::Registry;
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

/// Each coordinate's median over the group's contributions (the mean of the
/// two middle values for an even group).
#[derive(Debug)]
struct CoordinateMedian;

impl SyncRule for CoordinateMedian {
    fn reduce(&self, out: &mut [f32], contributions: &[&[f32]]) {
        let mut column = Vec::with_capacity(contributions.len());
        for (i, o) in out.iter_mut().enumerate() {
            column.clear();
            column.extend(contributions.iter().map(|c| c[i]));
            column.sort_by(f32::total_cmp);
            let middle = column.len() / 2;
            *o = match column.len() % 2 {
                1 => column[middle],
                _ => 0.5 * (column[middle - 1] + column[middle]),
            };
        }
    }
}

/// Groups of `size` consecutive trainers, the ring turned by one every round.
#[derive(Debug)]
struct Rotating {
    trainers: usize,
    size: usize,
}

impl GroupSchedule for Rotating {
    fn trainers(&self) -> usize {
        self.trainers
    }

    fn group_size(&self) -> usize {
        self.size
    }

    fn groups(&self, round: u64) -> Vec<Vec<usize>> {
        let (n, shift) = (self.trainers, (round % self.trainers as u64) as usize);
        let ring: Vec<usize> = (0..n).map(|i| (i + shift) % n).collect();
        ring.chunks(self.size)
            .map(|group| {
                let mut group = group.to_vec();
                group.sort_unstable();
                group
            })
            .collect()
    }
}

fn main() -> ExitCode {
    let registry = Registry::default()
        .rule("median", |_| Ok(Box::new(CoordinateMedian)))
        .schedule("rotating", |context| {
            let size = context.config.group_size_for(context.trainers);
            if context.trainers % size != 0 {
                return Err(shadowsync::runtime::Error::Config {
                    key: "sync.group_size".into(),
                    reason: format!("{size} must divide the {} trainers", context.trainers),
                });
            }
            Ok(Arc::new(Rotating {
                trainers: context.trainers,
                size,
            }))
        });
    let mut args: Vec<OsString> = std::env::args_os().collect();
    if args.len() == 1 {
        // A run of its own: logistic regression on 100,000 built-in rows.
        let run = "train --sync shadow-median --schedule rotating --group-size 2 --trainers 4 \
                   --model lr --rows 100000 --test-rows 10000 --eval-every 0";
        args.extend(run.split(' ').map(OsString::from));
    }
    shadowsync::cli::main_with_args(registry, args)
}
