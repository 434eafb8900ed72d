//! What the integration tests of the `shadowsync` crate share: its binary, the
//! sample files, and (in submodules) the CTR runs and jobs several tests
//! make. What the runtime's tests share too lives in `shadowsync-testkit`.

#![allow(dead_code, unused_imports)] // each test binary uses its own part

pub(crate) mod checkpoints;
pub(crate) mod ctr;
pub(crate) mod job;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub(crate) use shadowsync_testkit::exclusive;
pub(crate) use shadowsync_testkit::process::{output_within, run_within, text, RunToEnd};

/// A real Criteo sample file shipped with the tests (`tests/data/README.md` says
/// where each comes from).
pub(crate) fn sample(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The `shadowsync` binary with `args`, logging warnings only, its standard
/// input closed.
pub(crate) fn shadowsync(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shadowsync"));
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    command
}

/// [`shadowsync`] with `args`, run to its end ([`RunToEnd`]).
pub(crate) fn run(args: &[&str]) -> Output {
    shadowsync(args).run_to_end()
}
