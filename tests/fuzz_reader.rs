//! The Criteo reader under arbitrary and mutated input: every malformed line is
//! an error naming its line and field, never a panic; a truncated gzip file is
//! an I/O error naming the file.

mod common;

use common::sample;
use flate2::{write::GzEncoder, Compression};
use proptest::prelude::*;
use shadowsync::data::{parse_line, BadLinePolicy, CriteoReader, NUM_SPARSE};
use shadowsync::Error;
use std::io::Write;
use std::path::Path;

/// The real lines of a shipped Criteo sample.
fn real_lines() -> Vec<Vec<u8>> {
    let text = std::fs::read(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// One way of damaging a line.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Truncate { at: usize },
    DuplicateTabs { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..12)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        any::<usize>().prop_map(|at| Mutation::DuplicateTabs { at }),
    ]
}

fn apply(line: &mut Vec<u8>, mutation: &Mutation) {
    let at = |i: usize| i % (line.len() + 1);
    match mutation {
        Mutation::Flip { at: i, byte } => {
            if !line.is_empty() {
                let i = i % line.len();
                line[i] = *byte;
            }
        }
        Mutation::Insert { at: i, bytes } => {
            let i = at(*i);
            line.splice(i..i, bytes.iter().copied());
        }
        Mutation::Truncate { at: i } => line.truncate(at(*i)),
        Mutation::DuplicateTabs { at: i } => {
            let i = at(*i);
            line.splice(i..i, [b'\t', b'\t']);
        }
    }
}

/// What a parse may give: an example with finite features, or an error that
/// names a field of the line.
fn check(line: &[u8]) -> Result<(), TestCaseError> {
    match parse_line(line) {
        Ok(example) => {
            prop_assert!(example.label == 0.0 || example.label == 1.0);
            prop_assert!(example.dense.iter().all(|x| x.is_finite() && *x >= 0.0));
            prop_assert_eq!(example.sparse.len(), NUM_SPARSE);
        }
        Err(e) => {
            prop_assert!(e.field <= 40, "field {}", e.field);
            let message = e.at(Path::new("f.tsv"), 3).to_string();
            prop_assert!(message.starts_with("f.tsv:3: field "), "{}", message);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_parse_or_fail_cleanly(line in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&line)?;
    }

    #[test]
    fn mutated_real_lines_parse_or_fail_cleanly(
        pick in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let lines = real_lines();
        let mut line = lines[pick % lines.len()].clone();
        for m in &mutations {
            apply(&mut line, m);
        }
        check(&line)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A whole file of damaged lines under `skip`: every line is counted, read
    /// or skipped, and nothing panics.
    #[test]
    fn a_damaged_file_is_read_line_by_line_under_skip(
        mutations in proptest::collection::vec(proptest::option::of(mutation()), 100),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.tsv");
        let mut text = Vec::new();
        for (line, m) in real_lines().into_iter().zip(&mutations) {
            let mut line = line;
            if let Some(m) = m {
                apply(&mut line, m);
            }
            // A mutation may add line breaks of its own.
            text.extend(line);
            text.push(b'\n');
        }
        std::fs::write(&path, &text).unwrap();
        let mut reader = CriteoReader::open(&path, BadLinePolicy::Skip).unwrap();
        let mut read = 0u64;
        for example in reader.by_ref() {
            prop_assert!(example.is_ok(), "{:?}", example.err());
            read += 1;
        }
        let stats = reader.stats();
        let lines = text.iter().filter(|&&b| b == b'\n').count() as u64;
        prop_assert_eq!(stats.lines, lines);
        prop_assert_eq!(read + stats.skipped, lines);
    }
}

#[test]
fn a_truncated_gzip_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read(sample("criteo_kaggle_paddlerec_train100.tsv")).unwrap();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&text).unwrap();
    let bytes = gz.finish().unwrap();
    let path = dir.path().join("cut.tsv.gz");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let results: Vec<_> = CriteoReader::open(&path, BadLinePolicy::Fail)
        .unwrap()
        .collect();
    let error = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("a truncated gzip stream must not read as a shorter file");
    assert!(
        matches!(error, Error::Io { .. } | Error::Parse { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("cut.tsv.gz"), "{error}");
}
