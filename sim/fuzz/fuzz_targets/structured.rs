//! Target 2: `arbitrary`-derived programs of valid-looking instructions over small SBUF/PSUM/HBM
//! regions (with occasional wild sizes, offsets and steps), run through `Executor::run` with
//! random numerics settings. Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trnsim_fuzz::{run, structured};

fuzz_target!(|data: &[u8]| {
    if let Some((p, cfg, seed)) = structured(data) {
        run(&p, cfg, seed);
    }
});
