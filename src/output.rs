//! Writing output files so that a reader never sees half of one, and no
//! output ever replaces an input, a link or a device.
//!
//! [`write_atomic`] writes a file under a temporary name beside it, syncs it to
//! disk and renames it into place: on a full disk or a crash the file that was
//! there before stays whole (results, reports, plots, experiment files). A
//! symbolic link is written through: its target is replaced, the link stays.
//! What is not a regular file (`/dev/stdout`, a FIFO) is written in place,
//! never renamed over; a FIFO is waited on for a reader
//! [`FIFO_READER_WAIT`] at most, never for ever. [`check_output`] tries the same in advance and refuses
//! a path that is one of the run's inputs (`--results train.tsv`), so that a
//! path that cannot or must not be written is refused before a long run
//! rather than after it. [`write_output`] is the writer of every file the
//! project makes (results, experiments' run files, reports and plots): it
//! refuses a path that names one of the inputs, through links and other
//! spellings alike, and writes the rest atomically.

use crate::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a FIFO written in place is waited on for a reader.
pub const FIFO_READER_WAIT: Duration = Duration::from_secs(10);

/// Symbolic links followed before a chain is taken for a loop.
const MAX_LINKS: usize = 40;

/// The temporary file `write_atomic` writes `path` through.
fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// The directory `path` is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Where the bytes for `path` go.
enum Target {
    /// A regular file, or nothing yet: replaced atomically.
    File(PathBuf),
    /// A device, FIFO or socket: written in place.
    Special(PathBuf),
}

/// `path` with its symbolic links followed (to a target that may not exist
/// yet); an error for a directory.
fn target(path: &Path) -> Result<Target> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&at).map_err(|e| Error::io(&at, e))?;
                at = parent(&at).join(link);
            }
            Ok(meta) if meta.is_dir() => {
                return Err(Error::data(path, "is a directory, not a file to write"))
            }
            Ok(meta) if !meta.is_file() => return Ok(Target::Special(at)),
            _ => return Ok(Target::File(at)),
        }
    }
    Err(Error::data(path, "too many levels of symbolic links"))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory as the file it names (created if missing), synced, then renamed
/// over it. On an error that file is as it was and the temporary file is
/// gone. A device or FIFO is written in place.
///
/// # Errors
///
/// A temporary file that cannot be written or renamed over `path` ([`Error::Io`] naming
/// it).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let path = match target(path)? {
        Target::Special(device) => return write_in_place(&device, bytes, FIFO_READER_WAIT),
        Target::File(path) => path,
    };
    let dir = parent(&path);
    create_dir(dir)?;
    let partial = partial_path(&path);
    let written = File::create(&partial)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&partial, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(Error::io(&path, e));
    }
    // The rename itself, to disk (best effort: some file systems refuse).
    let _ = File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Writes `bytes` into a device, FIFO or socket in place. A FIFO without a
/// reader is waited on `wait` at most (a plain open would block for ever).
fn write_in_place(device: &Path, bytes: &[u8], wait: Duration) -> Result<()> {
    let waiting = Instant::now();
    // Opened without blocking, a FIFO with no reader fails at once (ENXIO).
    let _probe = loop {
        let probe = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(device);
        match probe {
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if waiting.elapsed() >= wait {
                    return Err(Error::data(
                        device,
                        format!(
                            "is a FIFO that nothing read in {} s, so nothing was written",
                            wait.as_secs_f64()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            probe => break probe.map_err(|e| Error::io(device, e))?,
        }
    };
    // A reader is there: the blocking open returns at once, and its writes
    // wait for the reader rather than fail.
    OpenOptions::new()
        .write(true)
        .open(device)
        .and_then(|mut d| d.write_all(bytes))
        .map_err(|e| Error::io(device, e))
}

/// Writes `bytes` to `path` as [`write_atomic`] does, unless `path` names
/// one of `inputs` (through links and other spellings alike).
///
/// # Errors
///
/// A path that names an input ([`Error::Data`] naming both), or as
/// [`write_atomic`].
pub fn write_output(path: &Path, bytes: &[u8], inputs: &[&Path]) -> Result<()> {
    refuse_inputs(path, inputs)?;
    write_atomic(path, bytes)
}

/// Refuses a `path` whose file (its links followed) is one of `inputs`.
fn refuse_inputs(path: &Path, inputs: &[&Path]) -> Result<()> {
    let Target::File(file) = target(path)? else {
        return Ok(());
    };
    let Some(written) = identity(&file) else {
        return Ok(());
    };
    match inputs.iter().find(|i| identity(i) == Some(written)) {
        Some(input) => Err(Error::data(
            path,
            format!(
                "is an input of this run ({}): writing there would destroy it",
                input.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Makes the directory `dir` and its parents; where one of them is a file,
/// the error names it as such (not the OS's "file exists").
///
/// # Errors
///
/// A directory that cannot be made, naming which part of the path is a file or cannot be
/// created ([`Error::Io`]).
pub fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        match dir.ancestors().find(|a| a.exists() && !a.is_dir()) {
            Some(file) if file == dir => Error::data(file, "is a file, not a directory"),
            Some(file) => Error::data(
                file,
                format!("is a file, not a directory (in {})", dir.display()),
            ),
            None => Error::io(dir, e),
        }
    })
}

/// The file (device, inode) `path` names, if it exists.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Checks that `path` can be written by [`write_atomic`] (its directory made,
/// a file created there and removed), without touching what is there, and
/// that it names none of `inputs` (through links and other spellings alike).
///
/// # Errors
///
/// A path that names an input ([`Error::Data`] naming it), or a place where no
/// file can be created ([`Error::Io`]).
pub fn check_output(path: &Path, inputs: &[&Path]) -> Result<()> {
    refuse_inputs(path, inputs)?;
    let file = match target(path)? {
        Target::Special(_) => return Ok(()),
        Target::File(file) => file,
    };
    let dir = parent(&file);
    create_dir(dir)?;
    let partial = partial_path(&file);
    File::create(&partial).map_err(|e| Error::io(path, e))?;
    std::fs::remove_file(&partial).map_err(|e| Error::io(&partial, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/results.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["results.json"]);
    }

    #[test]
    fn a_directory_or_an_unwritable_place_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_output(dir.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        assert!(write_atomic(dir.path(), b"x").is_err());
        // Under a regular file, no directory can be made.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let e = check_output(&file.join("results.json"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("plain"), "{e}");
    }

    #[test]
    fn a_link_is_written_through_and_an_input_is_refused_however_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.json");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("target.json", &link).unwrap();
        write_atomic(&link, b"through").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"through");
        let e = check_output(&link, &[&target]).unwrap_err().to_string();
        assert!(e.contains("an input of this run"), "{e}");
        let spelt_otherwise = dir.path().join(".").join("target.json");
        assert!(check_output(&spelt_otherwise, &[&target]).is_err());
        let e = write_output(&link, b"over it", &[&target])
            .unwrap_err()
            .to_string();
        assert!(e.contains("an input of this run"), "{e}");
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"through",
            "the input is whole"
        );
        write_output(&dir.path().join("other.json"), b"new", &[&target]).unwrap();
        assert!(check_output(&dir.path().join("other.json"), &[&target]).is_ok());
    }

    #[test]
    fn a_fifo_is_written_to_its_reader_and_refused_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("results");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let started = Instant::now();
        let e = write_in_place(&fifo, b"lost", Duration::from_millis(200)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("FIFO that nothing read"), "{e}");
        let reading = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read(reading).unwrap());
        let bytes = vec![7u8; 1 << 20];
        write_in_place(&fifo, &bytes, Duration::from_secs(10)).unwrap();
        assert_eq!(reader.join().unwrap(), bytes);
        assert!(!std::fs::metadata(&fifo).unwrap().is_file());
    }

    #[test]
    fn a_device_is_written_in_place_not_replaced() {
        write_atomic(Path::new("/dev/null"), b"gone").unwrap();
        let meta = std::fs::metadata("/dev/null").unwrap();
        assert!(!meta.is_file(), "/dev/null is still a device");
    }
}
