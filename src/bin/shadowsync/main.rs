//! The `shadowsync` command line with the built-in rules, schedules, models
//! and row optimizers (see [`shadowsync::cli`]).

fn main() -> std::process::ExitCode {
    shadowsync::cli::main(shadowsync::Registry::default())
}
