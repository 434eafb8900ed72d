//! The docs, held to what they describe: the book's lists of experiment grids,
//! benchmarks and `dev` commands to experiments/, Cargo.toml and the script;
//! every `mpirun` line a user may copy to running as root; the results table
//! to one short line a row. (The configuration reference is held to
//! `Config::default()` in src/config.rs; the changelog by
//! scripts/check-changelog.sh.)

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The names in `names` that `text` does not mention as `pattern(name)`.
fn missing(
    names: impl IntoIterator<Item = String>,
    text: &str,
    pattern: impl Fn(&str) -> String,
) -> BTreeSet<String> {
    names
        .into_iter()
        .filter(|name| !text.contains(&pattern(name)))
        .collect()
}

#[test]
fn the_book_lists_every_experiment_grid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let grids: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "toml").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    assert!(grids.len() > 10, "experiments/ holds the built-in grids");
    let absent = missing(grids, &read("docs/book/experiments.md"), |g| {
        format!("`{g}`")
    });
    assert!(
        absent.is_empty(),
        "docs/book/experiments.md does not list {absent:?}"
    );
}

#[test]
fn the_book_lists_every_benchmark() {
    let manifest: toml::Table = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml parses");
    let benches: Vec<String> = manifest["bench"]
        .as_array()
        .expect("[[bench]] entries")
        .iter()
        .filter_map(|b| b.get("name")?.as_str().map(str::to_owned))
        .collect();
    assert!(!benches.is_empty());
    let absent = missing(benches, &read("docs/book/experiments.md"), |b| {
        format!("./dev bench {b}")
    });
    assert!(
        absent.is_empty(),
        "docs/book/experiments.md does not list `./dev bench` {absent:?}"
    );
}

#[test]
fn the_architecture_chapter_names_every_dev_command() {
    let script = read("dev");
    let commands: Vec<String> = script
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("  ")?.strip_suffix(')')?;
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c == '-')
                .then(|| name.to_owned())
        })
        .collect();
    assert!(commands.len() > 5, "dev's commands: {commands:?}");
    let chapter = read("docs/book/architecture.md");
    let dev_line = chapter
        .split("\ndev ")
        .nth(1)
        .and_then(|rest| rest.split("\ndocs/").next())
        .expect("the architecture chapter's `dev` entry");
    let named: BTreeSet<&str> = dev_line
        .split(|c: char| c.is_whitespace() || c == '|')
        .collect();
    let absent: BTreeSet<_> = commands
        .iter()
        .filter(|c| !named.contains(c.as_str()))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/book/architecture.md's `dev` entry lacks {absent:?}"
    );
}

#[test]
fn every_single_host_mpirun_line_runs_as_root() {
    for doc in ["README.md", "docs/book/mpi.md", "examples/README.md"] {
        for line in read(doc)
            .lines()
            .filter(|l| l.trim_start().starts_with("mpirun "))
        {
            // A job over a hostfile runs on the user's own hosts, as they set it up.
            if line.contains("--hostfile") {
                continue;
            }
            assert!(
                line.contains("--allow-run-as-root"),
                "{doc}: `{line}` fails when the quick start runs as root"
            );
        }
    }
}

#[test]
fn the_results_table_reads_at_a_glance() {
    // One short line a row: the paragraphs live in each result's own page,
    // under its Findings.
    let table = read("docs/results/README.md");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
    assert!(rows.len() > 20, "the results table's rows");
    for row in rows {
        let chars = row.chars().count();
        assert!(
            chars <= 400,
            "docs/results/README.md: a row of {chars} characters (at most 400; the rest goes \
             to its page's Findings): {row}"
        );
    }
}
