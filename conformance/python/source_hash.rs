// A hash of every source file the Python extension is built from, so a test can tell an installed
// `trnsim` built from this tree from a stale one (docs/python.md, "Staleness").
//
// Shared, by `include!`/`#[path]`, between this crate's build.rs (which bakes the hash into the
// module as `trnsim._native.SOURCE_HASH`) and the root package's tests/python.rs (which recomputes
// it from the working tree). Plain std only: it runs inside a build script.

/// Paths, relative to the repository root, whose files (recursively) make up the extension.
pub const HASHED_PATHS: &[&str] = &[
    // The root manifest: sim and the lowering inherit versions from its [workspace] tables.
    "Cargo.toml",
    "sim/Cargo.toml",
    "sim/src",
    "conformance/lower/Cargo.toml",
    "conformance/lower/src",
    "conformance/data",
    "conformance/python/Cargo.toml",
    "conformance/python/Cargo.lock",
    "conformance/python/pyproject.toml",
    "conformance/python/build.rs",
    "conformance/python/source_hash.rs",
    "conformance/python/src",
    "conformance/python/python",
];

/// Whether a file under a hashed directory is build output rather than source.
fn is_build_output(path: &std::path::Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "__pycache__"
        || name.ends_with(".pyc")
        || name.ends_with(".so")
        || name.ends_with(".pyd")
        || name.ends_with(".dll")
        || name.ends_with(".dylib")
        || name.ends_with(".egg-info")
        || name.starts_with('.')
}

fn collect_files(root: &std::path::Path, rel: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let full = root.join(rel);
    if is_build_output(&full) {
        return;
    }
    if full.is_dir() {
        if let Ok(entries) = std::fs::read_dir(&full) {
            for entry in entries.flatten() {
                collect_files(root, &rel.join(entry.file_name()), out);
            }
        }
    } else if full.is_file() {
        out.push(rel.to_path_buf());
    }
}

/// FNV-1a (64-bit) over every hashed file's relative path and bytes, in sorted path order, as 16
/// hex digits. Missing paths contribute nothing (a tree without Cargo.lock still hashes).
pub fn source_hash(repo_root: &std::path::Path) -> String {
    let mut files = Vec::new();
    for p in HASHED_PATHS {
        collect_files(repo_root, std::path::Path::new(p), &mut files);
    }
    let mut names: Vec<String> = files.iter().map(|p| p.to_string_lossy().replace('\\', "/")).collect();
    names.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for name in &names {
        feed(name.as_bytes());
        feed(&[0]);
        feed(&std::fs::read(repo_root.join(name)).unwrap_or_default());
        feed(&[0]);
    }
    format!("{h:016x}")
}
