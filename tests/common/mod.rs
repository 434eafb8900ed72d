//! Helpers shared by the integration tests.

use std::path::PathBuf;

/// A real Criteo sample file shipped with the tests (`tests/data/README.md` says
/// where each comes from).
pub fn sample(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}
