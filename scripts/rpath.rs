//! Build script shared by the workspace's packages: bakes libtorch's library
//! directory into every binary, test and example as an rpath, so nothing needs
//! `LD_LIBRARY_PATH`. `LIBTORCH` comes from `.cargo/config.toml` (set up by
//! `scripts/setup.sh`) or from the environment.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(dir) = std::env::var("LIBTORCH") {
        let lib = PathBuf::from(dir).join("lib");
        let lib = lib.canonicalize().unwrap_or(lib);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
