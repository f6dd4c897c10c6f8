//! Bakes the hash of the sources this extension is built from into the module
//! (`trnsim._native.SOURCE_HASH`), so tests/python.rs can refuse a stale install.

include!("source_hash.rs");

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let repo_root = manifest.join("../..");
    for p in HASHED_PATHS {
        println!("cargo:rerun-if-changed={}", repo_root.join(p).display());
    }
    println!("cargo:rustc-env=TRNSIM_SOURCE_HASH={}", source_hash(&repo_root));
}
