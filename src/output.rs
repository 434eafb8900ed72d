//! Writing output files so that a reader never sees half of one.
//!
//! [`write_atomic`] writes a file under a temporary name beside it, syncs it to
//! disk and renames it into place: on a full disk or a crash the file that was
//! there before stays whole (results, reports, plots, experiment files).
//! [`check_writable`] tries the same in advance, so that a path that cannot be
//! written is refused before a long run rather than after it.

use crate::{Error, Result};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory (created if missing), synced, then renamed over `path`. On an
/// error `path` is as it was and the temporary file is gone.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.is_dir() {
        return Err(Error::data(path, "is a directory, not a file to write"));
    }
    let dir = parent(path);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let partial = partial_path(path);
    let written = File::create(&partial)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&partial, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(Error::io(path, e));
    }
    // The rename itself, to disk (best effort: some file systems refuse).
    let _ = File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Checks that `path` can be written by [`write_atomic`] (its directory made,
/// a file created there and removed), without touching `path` itself.
pub fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::data(path, "is a directory, not a file to write"));
    }
    let dir = parent(path);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let partial = partial_path(path);
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
        let e = check_writable(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        assert!(write_atomic(dir.path(), b"x").is_err());
        // Under a regular file, no directory can be made.
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let e = check_writable(&file.join("results.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("plain"), "{e}");
    }
}
