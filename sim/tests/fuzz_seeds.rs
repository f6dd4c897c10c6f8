//! The `from_json` fuzz target's seed programs (sim/fuzz/seeds/from_json), replayed in the normal
//! test run under every value of every `Numerics` setting: none may panic. The seed
//! `pairwise_odd_levels.json` is the regression input for the pairwise matmul tree that indexed
//! past its buffer (K = 5 partitions, M = 2 columns): it must run to completion under every
//! setting, so it cannot stop exercising the matmul by being refused.

use std::collections::BTreeMap;
use std::path::Path;
use trnsim::*;

/// Each setting changed from the default on its own, the default first. The `match` makes a new
/// variant a compile error until it is listed here.
fn numerics_variants() -> Vec<(&'static str, Numerics)> {
    let d = Numerics::default();
    let _every_variant_listed = |n: Numerics| match (n.rounding, n.denormals, n.nan_max_min, n.matmul_accumulation) {
        (
            RoundingMode::NearestEven | RoundingMode::Stochastic { .. },
            Denormals::Preserve | Denormals::FlushToZero,
            NanMaxMin::Propagate | NanMaxMin::PreferNumber,
            MatmulAccumulation::Sequential | MatmulAccumulation::Pairwise,
        ) => match n.activation {
            ActivationModel::Accurate | ActivationModel::Approximate { .. } => (),
        },
    };
    vec![
        ("default", d),
        (
            "activation=approximate:4",
            Numerics {
                activation: ActivationModel::Approximate { ulps: 4 },
                ..d
            },
        ),
        (
            "rounding=stochastic",
            Numerics {
                rounding: RoundingMode::Stochastic { seed: 7 },
                ..d
            },
        ),
        (
            "denormals=flush_to_zero",
            Numerics {
                denormals: Denormals::FlushToZero,
                ..d
            },
        ),
        (
            "nan_max_min=prefer_number",
            Numerics {
                nan_max_min: NanMaxMin::PreferNumber,
                ..d
            },
        ),
        (
            "matmul_accumulation=pairwise",
            Numerics {
                matmul_accumulation: MatmulAccumulation::Pairwise,
                ..d
            },
        ),
        (
            "emulate_act_copy_bias_bug=true",
            Numerics {
                emulate_act_copy_bias_bug: true,
                ..d
            },
        ),
    ]
}

/// Inputs of a deterministic byte pattern (small values in every dtype).
fn inputs(p: &Program) -> BTreeMap<String, HostTensor> {
    p.hbm
        .iter()
        .filter(|d| d.role == HbmRole::Input)
        .map(|d| {
            let bytes = d.shape.iter().product::<usize>() * d.dtype.size();
            let data = (0..bytes).map(|i| (i * 37 % 61) as u8 & 0x3f).collect();
            let t = HostTensor {
                dtype: d.dtype,
                shape: d.shape.clone(),
                data,
            };
            (d.name.clone(), t)
        })
        .collect()
}

#[test]
fn seeds_run_under_every_numerics_setting_without_panicking() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/from_json");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    assert!(seeds.iter().any(|p| p.ends_with("pairwise_odd_levels.json")));
    let mut panics = Vec::new();
    for path in &seeds {
        let text = std::fs::read_to_string(path).unwrap();
        let mut program = Program::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Seeds are written in program order; the race detector needs their cross-engine waits.
        trnsim::infer_waits(&mut program);
        let inputs = inputs(&program);
        for (name, numerics) in numerics_variants() {
            let config = ExecConfig {
                numerics,
                ..ExecConfig::default()
            };
            let run = std::panic::catch_unwind(|| Executor::with_config(program.target, config).run(&program, &inputs));
            match run {
                Err(_) => panics.push(format!("{} under {name}", path.display())),
                Ok(result) => {
                    if path.ends_with("pairwise_odd_levels.json") {
                        let out = result.unwrap_or_else(|e| panic!("{name}: the regression seed is refused: {e}"));
                        // Every product is 1.5 · 1.5 and K = 5: 11.25 exactly, in any order.
                        assert_eq!(out.outputs["y"].to_f32(), vec![11.25; 6], "{name}");
                    }
                }
            }
        }
    }
    assert!(panics.is_empty(), "panicked: {panics:#?}");
}
