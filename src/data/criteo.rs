//! The Criteo TSV format, read with the DLRM reference's conventions.
//!
//! A line is `label \t I1..I13 \t C1..C26`: label `0`/`1`, thirteen integer counts,
//! twenty-six categorical values written as (up to) 8 hex digits. An empty field is
//! a missing value, and a short line (trailing tabs trimmed) has its last fields
//! missing. As in DLRM: missing → 0, negative counts → 0, a count `x` becomes
//! `ln(x + 1)`, and a categorical value is its 32-bit integer, hashed into its
//! field's table later by [`crate::data::TableLayout`]. `\r\n` line ends and a
//! missing final newline are fine. Plain and gzip input is read alike (gzip is
//! recognized by its magic bytes, not the file name), from files, pipes or
//! standard input (`-`).

use crate::{Error, Result};
use flate2::read::MultiGzDecoder;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Number of integer (dense) features.
pub const NUM_DENSE: usize = 13;
/// Number of categorical (sparse) features.
pub const NUM_SPARSE: usize = 26;
/// Fields on a full line: label, dense, sparse.
pub const NUM_FIELDS: usize = 1 + NUM_DENSE + NUM_SPARSE;

/// One parsed example.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Example {
    /// 0.0 or 1.0.
    pub label: f32,
    /// `ln(max(x, 0) + 1)` of each count; 0 when missing.
    pub dense: [f32; NUM_DENSE],
    /// The 32-bit value of each categorical field; 0 when missing.
    pub sparse: [u32; NUM_SPARSE],
}

/// What to do with a malformed line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BadLinePolicy {
    /// Stop with an error naming the file, line and field.
    #[default]
    Fail,
    /// Skip the line, count it, and report the count at the end.
    Skip,
}

/// Name of the 0-based field `i`: `label`, `I1`..`I13`, `C1`..`C26`.
pub(crate) fn field_name(i: usize) -> String {
    match i {
        0 => "label".into(),
        i if i <= NUM_DENSE => format!("I{i}"),
        i if i < NUM_FIELDS => format!("C{}", i - NUM_DENSE),
        _ => "extra".into(),
    }
}

/// Why a line is malformed, before the file and line are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 0-based field index.
    pub field: usize,
    /// What is wrong.
    pub reason: &'static str,
    /// The offending text, shortened for messages.
    pub text: String,
}

impl LineError {
    fn new(field: usize, reason: &'static str, raw: &[u8]) -> Self {
        const MAX: usize = 40;
        let mut text = String::from_utf8_lossy(&raw[..raw.len().min(MAX)]).into_owned();
        if raw.len() > MAX {
            text.push('…');
        }
        Self {
            field,
            reason,
            text,
        }
    }

    /// Attaches the file and line number.
    pub fn at(self, path: &Path, line: u64) -> Error {
        Error::Parse {
            path: path.to_path_buf(),
            line,
            field: self.field + 1,
            name: field_name(self.field),
            reason: self.reason,
            text: self.text,
        }
    }
}

/// Parses one line (without its `\n`; a trailing `\r` is ignored).
///
/// # Errors
///
/// A line that is not a Criteo row: its field count, or the field and value that do not
/// parse ([`LineError`]).
pub fn parse_line(line: &[u8]) -> Result<Example, LineError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(LineError::new(0, "blank line", line));
    }
    let mut example = Example {
        label: 0.0,
        dense: [0.0; NUM_DENSE],
        sparse: [0; NUM_SPARSE],
    };
    let mut fields = line.split(|&b| b == b'\t');
    let label = fields.next().unwrap_or_default();
    example.label = match label {
        b"0" => 0.0,
        b"1" => 1.0,
        _ => return Err(LineError::new(0, "label must be 0 or 1", label)),
    };
    for (i, raw) in fields.enumerate() {
        let field = i + 1;
        if field <= NUM_DENSE {
            example.dense[i] = parse_count(raw).map_err(|r| LineError::new(field, r, raw))?;
        } else if field < NUM_FIELDS {
            example.sparse[field - 1 - NUM_DENSE] =
                parse_hex(raw).map_err(|r| LineError::new(field, r, raw))?;
        } else if !raw.is_empty() {
            // Empty fields past the 40th are trailing tabs, trimmed; a value
            // there is named as the first field too many.
            return Err(LineError::new(NUM_FIELDS, "more than 40 fields", raw));
        }
    }
    Ok(example)
}

/// `ln(max(x,0)+1)` of a decimal integer; 0 when empty.
fn parse_count(raw: &[u8]) -> Result<f32, &'static str> {
    let (negative, digits) = match raw {
        [] => return Ok(0.0),
        [b'-', rest @ ..] => (true, rest),
        _ => (false, raw),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("not an integer count");
    }
    // 18 digits always fit an i64.
    if digits.len() > 18 {
        return Err("integer count out of range (more than 18 digits)");
    }
    if negative {
        return Ok(0.0);
    }
    let value = digits
        .iter()
        .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
    Ok((value as f64).ln_1p() as f32)
}

/// The value of up to 8 hex digits; 0 when empty.
fn parse_hex(raw: &[u8]) -> Result<u32, &'static str> {
    if raw.len() > 8 {
        return Err("categorical value longer than 8 hex digits");
    }
    raw.iter().try_fold(0u32, |acc, &c| {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return Err("categorical value is not hex"),
        };
        Ok(acc << 4 | u32::from(digit))
    })
}

/// The longest line read, in bytes. A Criteo line is under 1 KB; a longer
/// line is malformed (a stray binary record, a line whose newlines were lost),
/// and reading it whole could take all the memory there is.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;

/// How far past [`MAX_LINE_BYTES`] a line is read, looking for its end, before
/// the input is taken for something that is not a data file at all
/// (`/dev/zero`, a binary).
pub(crate) const MAX_SKIPPED_BYTES: u64 = 64 << 20;

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line of this many bytes (with its `\n`, if any) appended.
    Read(usize),
    /// A line longer than [`MAX_LINE_BYTES`], read past to its end and not
    /// appended: a malformed line (see [`too_long`]).
    TooLong,
    /// The end of the input.
    End,
}

/// Appends the next line of `input` (with its `\n`, if any) to `buf`; `path`
/// and `line` (1-based) name it in errors. A line longer than
/// [`MAX_LINE_BYTES`] is read past, not kept; one with no end within
/// [`MAX_SKIPPED_BYTES`] more is an error.
///
/// # Errors
///
/// A line with no end within [`MAX_SKIPPED_BYTES`] past [`MAX_LINE_BYTES`], or a read that
/// fails ([`Error::Io`]).
pub(crate) fn read_line(
    input: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    path: &Path,
    line: u64,
) -> Result<Line> {
    let start = buf.len();
    let n = input
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', buf)
        .map_err(|e| Error::io(path, e))?;
    if n == 0 {
        return Ok(Line::End);
    }
    if n <= MAX_LINE_BYTES || buf.last() == Some(&b'\n') {
        return Ok(Line::Read(n));
    }
    buf.truncate(start);
    let mut skipped = 0u64;
    loop {
        let available = input.fill_buf().map_err(|e| Error::io(path, e))?;
        if available.is_empty() {
            return Ok(Line::TooLong);
        }
        if let Some(end) = available.iter().position(|&b| b == b'\n') {
            input.consume(end + 1);
            return Ok(Line::TooLong);
        }
        let length = available.len();
        input.consume(length);
        skipped += length as u64;
        if skipped > MAX_SKIPPED_BYTES {
            return Err(Error::data(
                path,
                format!(
                    "line {line} has no end within {} MiB: not a Criteo TSV file?",
                    MAX_SKIPPED_BYTES >> 20
                ),
            ));
        }
    }
}

/// The error of line `line`, found longer than [`MAX_LINE_BYTES`]: a malformed
/// line, dropped under `data.bad_lines = "skip"` like any other.
pub(crate) fn too_long(path: &Path, line: u64) -> Error {
    Error::data(
        path,
        format!(
            "line {line} is longer than {} KiB: a malformed line",
            MAX_LINE_BYTES / 1024
        ),
    )
}

/// The path that names standard input.
pub(crate) const STDIN: &str = "-";

/// Whether `path` is a regular file that is not gzip: one that can be read
/// many times over, cheaply (a pipe or standard input is read once; a gzip
/// stream costs its decompression each time).
///
/// # Errors
///
/// A path that cannot be inspected ([`Error::Io`] naming it).
pub(crate) fn rereadable(path: &Path) -> Result<bool> {
    if path == Path::new(STDIN) {
        return Ok(false);
    }
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Ok(false);
    }
    let mut magic = Vec::with_capacity(2);
    File::open(path)
        .and_then(|f| f.take(2).read_to_end(&mut magic))
        .map_err(|e| Error::io(path, e))?;
    Ok(magic != [0x1f, 0x8b])
}

/// Opens a data file, plain or gzip, for buffered reading: a regular file, a
/// pipe or FIFO (`<(zcat day_0.gz)`), or standard input (`-`). Gzip is told by
/// the stream's first two bytes, read once: nothing is read twice, so a pipe
/// loses nothing. Reaching a regular file's end is an error if it shrank or
/// was removed or replaced meanwhile.
///
/// # Errors
///
/// A file that cannot be opened or read, or a gzip header that is not one ([`Error::Io`]
/// naming it).
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let mut input: Box<dyn Read + Send> = if path == Path::new(STDIN) {
        Box::new(std::io::stdin())
    } else {
        Box::new(WatchedFile::open(path).map_err(|e| Error::io(path, e))?)
    };
    let mut magic = Vec::with_capacity(2);
    (&mut input)
        .take(2)
        .read_to_end(&mut magic)
        .map_err(|e| Error::io(path, e))?;
    let gzip = magic == [0x1f, 0x8b];
    let stream = std::io::Cursor::new(magic).chain(input);
    const CAPACITY: usize = 1 << 20;
    Ok(if gzip {
        Box::new(BufReader::with_capacity(
            CAPACITY,
            MultiGzDecoder::new(stream),
        ))
    } else {
        Box::new(BufReader::with_capacity(CAPACITY, stream))
    })
}

/// A file that, at its end, checks it is still the whole file it opened: one
/// truncated, removed or replaced while a run read it (its data is not what
/// the run was meant to train on) ends the read with an error saying so,
/// rather than passing for a shorter file.
struct WatchedFile {
    file: File,
    path: PathBuf,
    /// Size and (device, inode) when opened.
    size: u64,
    identity: (u64, u64),
    read: u64,
}

impl WatchedFile {
    fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            size: meta.len(),
            identity: (meta.dev(), meta.ino()),
            read: 0,
        })
    }

    /// Whether the file read to its end is the one opened, whole.
    fn check_at_end(&self) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        use std::os::unix::fs::MetadataExt;
        if self.read < self.size {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                format!(
                    "the file was truncated while it was read: it ended after {} of its {} bytes",
                    self.read, self.size
                ),
            ));
        }
        match std::fs::metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.identity => Ok(()),
            Ok(_) => Err(Error::other(
                "the file was replaced while it was read (another file has its name now)",
            )),
            Err(e) => Err(Error::new(
                e.kind(),
                format!("the file was removed while it was read: {e}"),
            )),
        }
    }
}

impl Read for WatchedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read += n as u64;
        if n == 0 && !buf.is_empty() {
            self.check_at_end()?;
        }
        Ok(n)
    }
}

/// Counts of a finished read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadStats {
    /// Lines read (including skipped ones).
    pub lines: u64,
    /// Malformed lines skipped under [`BadLinePolicy::Skip`].
    pub skipped: u64,
    /// The first few skip reasons, for the report.
    pub first_skipped: Vec<String>,
}

impl ReadStats {
    const KEEP: usize = 5;

    /// Records a skipped line.
    pub fn skip(&mut self, error: &Error) {
        self.skipped += 1;
        if self.first_skipped.len() < Self::KEEP {
            self.first_skipped.push(error.to_string());
        }
    }

    /// Adds another reader's counts.
    pub fn merge(&mut self, other: ReadStats) {
        self.lines += other.lines;
        self.skipped += other.skipped;
        let room = Self::KEEP.saturating_sub(self.first_skipped.len());
        self.first_skipped
            .extend(other.first_skipped.into_iter().take(room));
    }
}

/// A streaming reader of examples, one line at a time.
pub struct CriteoReader {
    path: PathBuf,
    input: Box<dyn BufRead + Send>,
    policy: BadLinePolicy,
    buf: Vec<u8>,
    stats: ReadStats,
    /// Set by a read error: the stream cannot go on past it.
    broken: bool,
}

impl CriteoReader {
    /// Opens `path`: a regular file, a pipe or FIFO, or standard input (`-`),
    /// plain or gzip (told by its first two bytes).
    ///
    /// # Errors
    ///
    /// A file that cannot be opened or read, or a gzip header that is not one
    /// ([`Error::Io`] naming it).
    pub fn open(path: impl AsRef<Path>, policy: BadLinePolicy) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let input = open(&path)?;
        Ok(Self {
            path,
            input,
            policy,
            buf: Vec::with_capacity(512),
            stats: ReadStats::default(),
            broken: false,
        })
    }

    /// Counts so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }
}

impl Iterator for CriteoReader {
    type Item = Result<Example>;

    /// The next example; after a read error (a truncated gzip stream, a file
    /// gone), that error once and then the end.
    fn next(&mut self) -> Option<Self::Item> {
        while !self.broken {
            self.buf.clear();
            let line = self.stats.lines + 1;
            let parsed = match read_line(&mut self.input, &mut self.buf, &self.path, line) {
                Ok(Line::End) => return None,
                Err(e) => {
                    self.broken = true;
                    return Some(Err(e));
                }
                Ok(Line::TooLong) => Err(too_long(&self.path, line)),
                Ok(Line::Read(_)) => {
                    let bytes = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                    parse_line(bytes).map_err(|e| e.at(&self.path, line))
                }
            };
            self.stats.lines = line;
            match (parsed, self.policy) {
                (Ok(example), _) => return Some(Ok(example)),
                (Err(error), BadLinePolicy::Fail) => return Some(Err(error)),
                (Err(error), BadLinePolicy::Skip) => self.stats.skip(&error),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(fields: &[&str]) -> Vec<u8> {
        fields.join("\t").into_bytes()
    }

    #[test]
    fn parses_dlrm_conventions() {
        let mut fields = vec!["1", "0", "-1", "", "4"];
        fields.extend(["1"; 9]);
        fields.extend(["05db9164", "", "FFFFFFFF"]);
        fields.extend(["0a"; 23]);
        let ex = parse_line(&line(&fields)).unwrap();
        assert_eq!(ex.label, 1.0);
        assert_eq!(ex.dense[0], 0.0); // ln(0+1)
        assert_eq!(ex.dense[1], 0.0); // negative -> 0
        assert_eq!(ex.dense[2], 0.0); // missing -> 0
        assert!((ex.dense[3] - 5f32.ln()).abs() < 1e-6);
        assert_eq!(ex.sparse[0], 0x05db9164);
        assert_eq!(ex.sparse[1], 0); // missing
        assert_eq!(ex.sparse[2], u32::MAX);
        assert_eq!(ex.sparse[25], 10);
    }

    #[test]
    fn short_lines_and_crlf_read_as_missing_values() {
        let ex = parse_line(b"0\t3\t\t7\r").unwrap();
        assert_eq!(ex.label, 0.0);
        assert!((ex.dense[0] - 4f32.ln()).abs() < 1e-6);
        assert!((ex.dense[2] - 8f32.ln()).abs() < 1e-6);
        assert_eq!(ex.dense[3..], [0.0; 10]);
        assert_eq!(ex.sparse, [0; NUM_SPARSE]);
    }

    #[test]
    fn malformed_fields_are_named() {
        let err = |l: &[u8]| parse_line(l).unwrap_err();
        assert_eq!(err(b"2\t1").field, 0);
        assert_eq!(err(b"").field, 0);
        let e = err(b"1\t3\t4.5");
        assert_eq!((e.field, e.text.as_str()), (2, "4.5"));
        assert_eq!(err(b"1\t-").field, 1);
        let huge = err(b"1\t99999999999999999999");
        assert_eq!(huge.field, 1);
        assert!(huge.reason.contains("out of range"), "{}", huge.reason);
        let mut fields = vec!["0"; 14];
        fields.push("zz123456");
        assert_eq!(err(&line(&fields)).field, 14);
        fields[14] = "123456789";
        assert_eq!(
            err(&line(&fields)).reason,
            "categorical value longer than 8 hex digits"
        );
        let too_many = line(&vec!["1"; 41]);
        assert_eq!(err(&too_many).field, 40);
        assert_eq!(err(b"\r").reason, "blank line");
        // Trailing tabs after the 40th field are trimmed, not extra fields.
        let mut trailing = line(&vec!["1"; 40]);
        trailing.extend_from_slice(b"\t\t\r");
        assert!(parse_line(&trailing).is_ok());
        let garbage = err(b"\xff\xfe\x00binary");
        assert_eq!(garbage.field, 0);
        assert!(garbage.text.contains('\u{fffd}'));
    }

    #[test]
    fn error_message_names_file_line_field_and_text() {
        let e = parse_line(b"1\t3\tabc")
            .unwrap_err()
            .at(Path::new("day_0.tsv"), 17);
        assert_eq!(
            e.to_string(),
            "day_0.tsv:17: field 3 (I2): not an integer count: \"abc\""
        );
    }

    #[test]
    fn field_names() {
        assert_eq!(field_name(0), "label");
        assert_eq!(field_name(1), "I1");
        assert_eq!(field_name(13), "I13");
        assert_eq!(field_name(14), "C1");
        assert_eq!(field_name(39), "C26");
        assert_eq!(field_name(40), "extra");
    }

    /// A file of `lines` valid lines, and a reader that has read its first.
    fn opened(dir: &Path, lines: usize) -> (PathBuf, CriteoReader) {
        let path = dir.join("day.tsv");
        let mut row = vec!["1"; 14];
        row.extend(["05db9164"; 26]);
        let text = format!("{}\n", row.join("\t")).repeat(lines);
        std::fs::write(&path, text).unwrap();
        let mut reader = CriteoReader::open(&path, BadLinePolicy::Fail).unwrap();
        assert!(reader.next().unwrap().is_ok());
        (path, reader)
    }

    /// The error that ended a read of `reader`, naming `path`.
    fn end_error(reader: CriteoReader, path: &Path) -> String {
        let error = reader
            .filter_map(Result::err)
            .next()
            .expect("the read ends with an error")
            .to_string();
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        error
    }

    #[test]
    fn a_file_truncated_while_read_is_an_error_not_a_shorter_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, reader) = opened(dir.path(), 100_000);
        let size = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(size / 3).unwrap();
        let error = end_error(reader, &path);
        assert!(error.contains("truncated while it was read"), "{error}");
        assert!(error.contains(&format!("of its {size} bytes")), "{error}");
    }

    #[test]
    fn an_over_long_line_is_named_or_skipped_and_the_lines_after_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.tsv");
        let long = "1\t".to_string() + &"7".repeat(MAX_LINE_BYTES + 10);
        std::fs::write(&path, format!("0\t1\n{long}\n1\t2\n")).unwrap();
        let mut failing = CriteoReader::open(&path, BadLinePolicy::Fail).unwrap();
        assert!(failing.next().unwrap().is_ok());
        let e = failing.next().unwrap().unwrap_err().to_string();
        assert!(e.contains("line 2 is longer than 64 KiB"), "{e}");
        let mut skipping = CriteoReader::open(&path, BadLinePolicy::Skip).unwrap();
        let labels: Vec<f32> = skipping.by_ref().map(|e| e.unwrap().label).collect();
        assert_eq!(labels, [0.0, 1.0]);
        assert_eq!((skipping.stats().lines, skipping.stats().skipped), (3, 1));
    }

    #[test]
    fn a_file_removed_or_replaced_while_read_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (path, reader) = opened(dir.path(), 10);
        std::fs::remove_file(&path).unwrap();
        let error = end_error(reader, &path);
        assert!(error.contains("removed while it was read"), "{error}");
        let (path, reader) = opened(dir.path(), 10);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        let error = end_error(reader, &path);
        assert!(error.contains("replaced while it was read"), "{error}");
    }
}
