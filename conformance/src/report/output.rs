//! The one way every `trnconf` command writes an output file, and the files an output may never
//! be (docs/workflow.md, "Output files").
//!
//! * [`Inputs`]: the files a command reads (the golden index and every case file it lists, the
//!   expectations file, results files, a model's files). An output that names one of them (by
//!   path, through a symlink or as a hard link: the test is the file's device and inode) is bad
//!   input, refused before any work. `run --resume FILE` is the one reader-writer: FILE is not
//!   an input of the run, it is its output.
//! * [`write_file`]: a regular file (or a new one) is written to a temporary file beside it and
//!   renamed over it, so a reader never sees half a file and a failed write leaves the old file
//!   as it was and no temporary file behind. A symlink is written through (its target is
//!   replaced, the link stays). A FIFO, character or block device or socket is opened and written
//!   in place, never renamed over. A directory is refused.

use crate::case::GoldenIndex;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many symlinks [`write_file`] follows before it gives up (as the kernel's ELOOP).
const MAX_LINKS: usize = 40;

/// A file's identity: device and inode where the platform has them, else its canonical path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg(not(unix))]
    Path(PathBuf),
}

/// The identity of an existing file (following symlinks); `None` when it does not exist.
fn file_id(p: &Path) -> Option<FileId> {
    let m = std::fs::metadata(p).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = p;
        Some(FileId::Inode(m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        std::fs::canonicalize(p).ok().map(FileId::Path)
    }
}

/// Whether `p` (following symlinks) is a regular file or does not exist yet: the kinds of
/// target two outputs must not share. Two outputs may both be `/dev/null`.
fn is_regular_or_new(p: &Path) -> bool {
    std::fs::metadata(p).map_or(true, |m| m.is_file())
}

/// The files a command reads, which none of its outputs may name.
#[derive(Debug, Default)]
pub struct Inputs {
    files: HashMap<FileId, String>,
}

impl Inputs {
    pub fn new() -> Inputs {
        Inputs::default()
    }

    /// Adds one input file, described as `what` in the error (e.g. "the expectations file").
    /// A file that does not exist is not an input (nothing can be lost).
    pub fn add(&mut self, what: impl Into<String>, path: &Path) {
        if let Some(id) = file_id(path) {
            self.files
                .entry(id)
                .or_insert_with(|| format!("{} {}", what.into(), path.display()));
        }
    }

    /// Adds a golden directory's index and every case file it lists.
    pub fn add_golden(&mut self, index: &GoldenIndex) {
        let idx = index.dir.join("index.json");
        self.add("the golden index", &idx);
        for c in &index.cases {
            self.add("the golden case file", &index.dir.join(&c.file));
        }
    }

    /// Adds every file directly inside `dir` (a model directory).
    pub fn add_dir(&mut self, what: &str, dir: &Path) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_file() {
                    self.add(what, &p);
                }
            }
        }
    }

    /// Checks a command's outputs, `(flag, path)` each: none is an input, a directory, or in a
    /// directory that does not exist, and no two name the same regular file. One-line errors.
    pub fn check_outputs(&self, outputs: &[(&str, &Path)]) -> Result<(), String> {
        for (i, (flag, path)) in outputs.iter().enumerate() {
            check_writable(flag, path)?;
            if let Some(what) = file_id(path).and_then(|id| self.files.get(&id)) {
                return Err(format!(
                    "{flag} {}: is {what}, which this command reads; an output never overwrites an input",
                    path.display()
                ));
            }
            for (flag2, path2) in &outputs[..i] {
                if is_regular_or_new(path) && same_target(path, path2) {
                    return Err(format!(
                        "{flag} {} and {flag2} {}: the same file; give each output its own",
                        path.display(),
                        path2.display()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether two output paths name the same file: the same existing file, or the same new path.
fn same_target(a: &Path, b: &Path) -> bool {
    match (file_id(a), file_id(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => absolute(a) == absolute(b),
        _ => false,
    }
}

/// `p` with its directory canonicalized (for comparing paths of files that do not exist yet).
fn absolute(p: &Path) -> PathBuf {
    let dir = parent_dir(p);
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match p.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    }
}

fn parent_dir(p: &Path) -> &Path {
    p.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// An output path must be writable in principle: not a directory, and (for a new file) in a
/// directory that exists. Checked before any work, so bad input never leaves half the outputs.
fn check_writable(flag: &str, path: &Path) -> Result<(), String> {
    let target = resolve_links(path).map_err(|e| format!("{flag} {e}"))?;
    if target.is_dir() {
        return Err(format!("{flag} {}: is a directory", path.display()));
    }
    let dir = parent_dir(&target);
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Follows `path` through symlinks to the path that is finally written (which need not exist).
fn resolve_links(path: &Path) -> Result<PathBuf, String> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&p).map_err(|e| format!("{}: {e}", path.display()))?;
                p = if link.is_absolute() {
                    link
                } else {
                    parent_dir(&p).join(link)
                };
            }
            _ => return Ok(p),
        }
    }
    Err(format!("{}: too many levels of symbolic links", path.display()))
}

/// Writes `bytes` to `path` by the policy of this module's header: atomically for a regular or
/// new file, through a symlink, in place for a FIFO or device, never onto a directory. A failed
/// write leaves no temporary file. Errors are one line naming `path`.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let target = resolve_links(path)?;
    match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => Err(format!("{}: is a directory", path.display())),
        Ok(m) if !m.is_file() => {
            // A FIFO, device or socket: written in place, as a shell's `>` would.
            let mut f = std::fs::OpenOptions::new().write(true).open(&target).map_err(err)?;
            f.write_all(bytes).and_then(|_| f.flush()).map_err(err)
        }
        Ok(m) => write_replacing(path, &target, bytes, Some(m.permissions())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_replacing(path, &target, bytes, None),
        Err(e) => Err(err(e)),
    }
}

/// A temporary file beside `target`, filled, synced and renamed over it; removed on any error.
fn write_replacing(
    shown: &Path,
    target: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> Result<(), String> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent_dir(target).join(format!(
        ".{name}.tmp{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        // Errors a full disk reports late (at close) surface here, not after the rename.
        f.sync_all()?;
        drop(f);
        if let Some(p) = permissions {
            std::fs::set_permissions(&tmp, p)?;
        }
        std::fs::rename(&tmp, target)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", shown.display())
    })
}

/// Reads a file this command may also write (`coverage --markdown FILE` keeps sections of the
/// page it replaces): only a regular file, and at most `limit` bytes, else an error. A FIFO or
/// device is not read (`Ok(None)`), nor a file that does not exist.
pub fn read_existing(path: &Path, limit: u64) -> Result<Option<String>, String> {
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if !m.is_file() {
        return Ok(None);
    }
    if m.len() > limit {
        return Err(format!(
            "{}: {} bytes, more than the {limit} this command reads back; not a page it wrote",
            path.display(),
            m.len()
        ));
    }
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > limit {
        return Err(format!("{}: grew past {limit} bytes while read", path.display()));
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::TempDir;

    fn leftovers(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn regular_new_and_symlinked_files() {
        let dir = TempDir::new("output-write");
        let p = dir.path().join("r.json");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.json");
            std::os::unix::fs::symlink("r.json", &link).unwrap();
            write_file(&link, b"three").unwrap();
            assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
            assert_eq!(std::fs::read(&p).unwrap(), b"three");
            // A dangling link is written through too: its target is created.
            let dangling = dir.path().join("d.json");
            std::os::unix::fs::symlink("made.json", &dangling).unwrap();
            write_file(&dangling, b"four").unwrap();
            assert_eq!(std::fs::read(dir.path().join("made.json")).unwrap(), b"four");
            // A loop is an error, not a hang.
            let a = dir.path().join("a");
            std::os::unix::fs::symlink("b", &a).unwrap();
            std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
            assert!(write_file(&a, b"x").unwrap_err().contains("symbolic links"));
        }
        let e = write_file(dir.path(), b"x").unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));
    }

    #[test]
    fn failed_write_leaves_the_old_file_and_no_temp_file() {
        let dir = TempDir::new("output-fail");
        let p = dir.path().join("sub").join("r.json");
        let e = write_file(&p, b"x").unwrap_err();
        assert!(e.contains("r.json"), "{e}");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn inputs_are_refused_by_identity() {
        let dir = TempDir::new("output-inputs");
        let input = dir.path().join("index.json");
        std::fs::write(&input, "[]").unwrap();
        let mut inputs = Inputs::new();
        inputs.add("the golden index", &input);
        let e = inputs.check_outputs(&[("--json", &input)]).unwrap_err();
        assert!(e.contains("--json") && e.contains("the golden index"), "{e}");
        let hard = dir.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        assert!(inputs.check_outputs(&[("--html", &hard)]).is_err());
        let out = dir.path().join("r.json");
        inputs.check_outputs(&[("--json", &out)]).unwrap();
        let e = inputs.check_outputs(&[("--json", &out), ("--html", &out)]).unwrap_err();
        assert!(e.contains("the same file"), "{e}");
        #[cfg(unix)]
        inputs
            .check_outputs(&[("--json", Path::new("/dev/null")), ("--html", Path::new("/dev/null"))])
            .unwrap();
    }

    #[test]
    fn read_existing_is_bounded() {
        let dir = TempDir::new("output-read");
        let p = dir.path().join("page.md");
        assert_eq!(read_existing(&p, 10).unwrap(), None);
        std::fs::write(&p, "short").unwrap();
        assert_eq!(read_existing(&p, 10).unwrap().as_deref(), Some("short"));
        std::fs::write(&p, "much longer than ten").unwrap();
        assert!(read_existing(&p, 10).unwrap_err().contains("more than"));
        #[cfg(unix)]
        assert_eq!(read_existing(Path::new("/dev/zero"), 10).unwrap(), None);
    }
}
