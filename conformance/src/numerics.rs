//! The simulator's numerics settings ([`trnsim::Numerics`], documented in docs/numerics.md) as
//! command-line text: `trnconf run --numerics KEY=VALUE,...` (also `show` and `lower`), recorded
//! in results files and reports in the same form.
//!
//! Keys and values are the serde names of `Numerics`: `rounding=nearest_even|stochastic[:SEED]`,
//! `denormals=preserve|flush_to_zero`, `nan_max_min=propagate|prefer_number`,
//! `matmul_accumulation=sequential|pairwise`, `activation=accurate`,
//! `emulate_act_copy_bias_bug=false|true`, `mx_element_rounding=nearest_even|toward_zero`,
//! `int64_alu=gpsimd_exact|fp32`. Unnamed settings keep their defaults.

use serde_json::{Map, Value};
use trnsim::{
    ActivationModel, Denormals, Int64Alu, MatmulAccumulation, MxElementRounding, NanMaxMin, Numerics, RoundingMode,
};

/// Every key, in `Numerics` field order.
pub const KEYS: [&str; 8] = [
    "rounding",
    "denormals",
    "nan_max_min",
    "matmul_accumulation",
    "activation",
    "emulate_act_copy_bias_bug",
    "mx_element_rounding",
    "int64_alu",
];

/// Parses `KEY=VALUE,...` (empty: the defaults). Errors are one line naming the bad part.
pub fn parse(spec: &str) -> Result<Numerics, String> {
    let mut fields = match serde_json::to_value(Numerics::default()) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}`: expected KEY=VALUE (keys: {})", KEYS.join(", ")))?;
        let (key, value) = (key.trim(), value.trim());
        if !KEYS.contains(&key) {
            return Err(format!("unknown setting `{key}` (keys: {})", KEYS.join(", ")));
        }
        let v = match (key, value.split_once(':')) {
            ("rounding", Some(("stochastic", seed))) => {
                let seed: u64 = seed
                    .parse()
                    .map_err(|_| format!("rounding=stochastic:{seed}: the seed is not a number"))?;
                serde_json::json!({ "stochastic": { "seed": seed } })
            }
            ("rounding", None) if value == "stochastic" => serde_json::json!({ "stochastic": { "seed": 0 } }),
            ("emulate_act_copy_bias_bug", _) => match value {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(format!("{key}={value}: expected true or false")),
            },
            _ => Value::String(value.to_string()),
        };
        let one: Map<String, Value> = [(key.to_string(), v.clone())].into_iter().collect();
        serde_json::from_value::<Numerics>(Value::Object(one)).map_err(|e| format!("{key}={value}: {e}"))?;
        fields.insert(key.to_string(), v);
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| format!("--numerics {spec}: {e}"))
}

/// One setting's value as text (`stochastic:7`, `pairwise`, `true`).
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .iter()
            .map(|(k, inner)| match inner.get("seed") {
                Some(seed) => format!("{k}:{seed}"),
                None => k.clone(),
            })
            .collect(),
        other => other.to_string(),
    }
}

/// The settings that differ from the defaults as `KEY=VALUE,...`, or `default`. [`parse`] reads
/// it back to the same settings.
pub fn describe(n: &Numerics) -> String {
    let (Ok(Value::Object(now)), Ok(Value::Object(default))) =
        (serde_json::to_value(n), serde_json::to_value(Numerics::default()))
    else {
        return format!("{n:?}");
    };
    let changed: Vec<String> = KEYS
        .iter()
        .filter(|k| now.get(**k) != default.get(**k))
        .map(|k| format!("{k}={}", now.get(*k).map(value_text).unwrap_or_default()))
        .collect();
    if changed.is_empty() {
        "default".into()
    } else {
        changed.join(",")
    }
}

/// Every value of every setting that the golden suite can reach (not `mx_element_rounding`: NC-v4
/// MX instructions only), one setting changed from the defaults at a time (the defaults
/// first), with its `--numerics` text. The `match` makes a new variant a compile error here
/// until it is listed.
pub fn every_setting() -> Vec<(String, Numerics)> {
    let d = Numerics::default();
    let _every_variant_listed = |n: Numerics| match (n.rounding, n.denormals, n.nan_max_min, n.matmul_accumulation) {
        (
            RoundingMode::NearestEven | RoundingMode::Stochastic { .. },
            Denormals::Preserve | Denormals::FlushToZero,
            NanMaxMin::Propagate | NanMaxMin::PreferNumber,
            MatmulAccumulation::Sequential | MatmulAccumulation::Pairwise,
        ) => match (n.activation, n.mx_element_rounding, n.int64_alu) {
            (
                ActivationModel::Accurate | ActivationModel::Approximate { .. },
                // Not run below: it changes only NC-v4's `quantize_mx`, which no golden case uses
                // (sim/tests/mx.rs covers both values).
                MxElementRounding::NearestEven | MxElementRounding::TowardZero,
                // Not run below: it changes only `i64` operands, which exist only with
                // `--native-int64` (sim/tests/int64.rs covers both values).
                Int64Alu::GpsimdExact | Int64Alu::Fp32,
            ) => (),
        },
    };
    [
        d,
        Numerics {
            rounding: RoundingMode::Stochastic { seed: 1 },
            ..d
        },
        Numerics {
            denormals: Denormals::FlushToZero,
            ..d
        },
        Numerics {
            nan_max_min: NanMaxMin::PreferNumber,
            ..d
        },
        Numerics {
            matmul_accumulation: MatmulAccumulation::Pairwise,
            ..d
        },
        Numerics {
            emulate_act_copy_bias_bug: true,
            ..d
        },
    ]
    .into_iter()
    .map(|n| (describe(&n), n))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_describe_round_trip() {
        assert_eq!(parse("").unwrap(), Numerics::default());
        assert_eq!(describe(&Numerics::default()), "default");
        let n = parse("matmul_accumulation=pairwise, rounding=stochastic:7").unwrap();
        assert_eq!(n.matmul_accumulation, MatmulAccumulation::Pairwise);
        assert_eq!(n.rounding, RoundingMode::Stochastic { seed: 7 });
        assert_eq!(describe(&n), "rounding=stochastic:7,matmul_accumulation=pairwise");
        for (text, n) in every_setting() {
            let back = if text == "default" { parse("") } else { parse(&text) };
            assert_eq!(back.unwrap(), n, "{text}");
        }
        assert_eq!(every_setting().len(), 6);
    }

    #[test]
    fn bad_settings_are_one_line_errors() {
        for (spec, says) in [
            ("pairwise", "expected KEY=VALUE"),
            ("matmul=pairwise", "unknown setting `matmul`"),
            ("matmul_accumulation=tree", "unknown variant `tree`"),
            ("rounding=stochastic:x", "not a number"),
            ("emulate_act_copy_bias_bug=yes", "true or false"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(says) && !e.contains('\n'), "{spec}: {e}");
        }
    }
}
