//! Generations as data: the three targets' published figures and capability lists, and the
//! typed refusals that name the generation.

#[allow(unused_macros)]
mod common;
mod refuse;

use common::sb;
use trnsim::program::{ActFunc, Activation, Engine, Op, ScalarOperand, TensorCopy};
use trnsim::{DType, ErrorKind, Program, Target, TargetName};

#[test]
fn names_parse_in_one_place_and_round_trip() {
    for t in trnsim::target::ALL_TARGETS {
        assert_eq!(TargetName::from_name(t.name()), Some(t));
        assert_eq!(t.params().name, t);
    }
    assert_eq!(TargetName::from_name("trn4"), None);
    assert_eq!(TargetName::from_name("TRN1"), None);
    assert_eq!(TargetName::ALL, trnsim::target::ALL_TARGETS);
    assert_eq!(TargetName::names().collect::<Vec<_>>(), ["trn1", "trn2", "trn3"]);
}

/// `ALL_TARGETS` lists every variant once (a new variant fails to compile in the match below
/// until it is added here, and then this test until it is in the list), and a program's JSON
/// spells a target as its name.
#[test]
fn the_target_list_has_every_variant() {
    let every = |t: TargetName| match t {
        TargetName::Trn1 | TargetName::Trn2 | TargetName::Trn3 => t,
    };
    for t in [TargetName::Trn1, TargetName::Trn2, TargetName::Trn3] {
        assert_eq!(TargetName::ALL.iter().filter(|&&a| a == every(t)).count(), 1, "{t:?}");
        assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.name()));
    }
}

#[test]
fn published_figures_per_generation() {
    let (t1, t2, t3) = (Target::trn1(), Target::trn2(), Target::trn3());
    // SBUF per core: 24 MiB, 28 MiB, 32 MiB over 128 partitions.
    assert_eq!(t1.sbuf_core_bytes(), 24 << 20);
    assert_eq!(t2.sbuf_core_bytes(), 28 << 20);
    assert_eq!(t3.sbuf_core_bytes(), 32 << 20);
    // PSUM 2 MiB per core, 8 banks of 2 KiB per partition, on all three.
    for t in [&t1, &t2, &t3] {
        assert_eq!(t.partitions * t.psum_partition_bytes, 2 << 20);
        assert_eq!(t.psum_banks * t.psum_bank_bytes, t.psum_partition_bytes);
    }
    assert_eq!((t1.cores_per_chip, t2.cores_per_chip, t3.cores_per_chip), (2, 8, 8));
    assert_eq!(t2.hbm_core_bytes(), 12 << 30);
    assert_eq!(t3.hbm_core_bytes(), 18 << 30);
    assert_eq!(t1.lnc_allowed, &[1]);
    assert_eq!((t2.lnc_default, t3.lnc_default), (2, 2));
    assert_eq!(
        (t3.tensor_ghz, t3.vector_ghz, t3.scalar_ghz, t3.gpsimd_ghz),
        (2.4, 1.2, 1.2, 1.2)
    );
    assert_eq!((t1.nc_version, t2.nc_version, t3.nc_version), (2, 3, 4));
}

#[test]
fn capabilities_grow_with_the_generation() {
    let ts = [Target::trn1(), Target::trn2(), Target::trn3()];
    // Each generation keeps every instruction and dtype of the one before.
    for w in ts.windows(2) {
        for i in w[0].instructions {
            assert!(w[1].has_instruction(i), "{} lost {i}", w[1].label);
        }
        for d in w[0].dtypes {
            assert!(w[1].has_dtype(*d), "{} lost {d}", w[1].label);
        }
    }
    assert!(!ts[0].has_instruction("range_select") && ts[1].has_instruction("range_select"));
    assert!(!ts[0].native_int64 && ts[1].native_int64 && ts[2].native_int64);
    assert!(!ts[1].indirect_on_chip_addressing && ts[2].indirect_on_chip_addressing);
}

#[test]
fn target_serialises_with_its_capabilities() {
    let v = serde_json::to_value(Target::trn3()).unwrap();
    assert_eq!(v["name"], "trn3");
    assert_eq!(v["core"], "NeuronCore-v4");
    assert!(
        v["instructions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "range_select")
    );
    assert!(v["dtypes"].as_array().unwrap().iter().any(|d| d == "bf16"));
    assert_eq!(v["lnc_allowed"], serde_json::json!([1, 2]));
}

#[test]
fn an_nc_v3_instruction_is_refused_on_trn1_naming_the_generation() {
    // ScalarE tensor_copy exists from NeuronCore-v3 on.
    let op = Op::TensorCopy(TensorCopy {
        dst: sb(DType::F32, 0, 4, 0, 8),
        src: sb(DType::F32, 0, 4, 0, 8),
    });
    let p = Program::new(TargetName::Trn1);
    refuse::assert_not_on_target(p, Engine::Scalar, op.clone(), "tensor_copy", "trn1 (NeuronCore-v2)");
    assert!(trnsim::engine::runs_on(&Target::trn2(), &op, Engine::Scalar));
    assert!(trnsim::engine::runs_on(&Target::trn3(), &op, Engine::Scalar));
    // An engine no generation gives the instruction stays a wrong-engine error.
    let act = Op::Activation(Activation {
        dst: sb(DType::F32, 0, 4, 0, 8),
        src: sb(DType::F32, 0, 4, 0, 8),
        func: ActFunc::Copy,
        bias: None,
        scale: ScalarOperand::Imm(1.0),
        acc: Default::default(),
        reduce_res: None,
    });
    assert!(matches!(
        trnsim::engine::check_runs_on(&Target::trn3(), &act, Engine::Vector),
        Err(ErrorKind::WrongEngine { .. })
    ));
}
