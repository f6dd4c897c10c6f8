//! Root package: exists so that the top-level `tests/` folder (end-to-end tests) runs.
