//! The ATen-call vocabulary a lowering reads: argument values ([`Value`]), calls ([`OpCall`]) and
//! tensor metadata ([`TensorMeta`]), in the golden value encoding (docs/golden-format.md). The
//! harness's golden loader and the PyTorch device both speak it; neither tensor values nor
//! golden outputs appear here. It also holds the one set of typed argument accessors every
//! lowering reads its call with ([`LowerRequest::arg`], [`FromArg`]; docs/lowering.md,
//! "Arguments").

use crate::dtype::TorchDType;
use crate::{LowerError, LowerRequest};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Values

/// A float that may be non-finite; the format writes non-finite values as `"nan"`, `"inf"`,
/// `"-inf"` (JSON has no such numbers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JsonFloat(pub f64);

impl<'de> Deserialize<'de> for JsonFloat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(x) => Ok(JsonFloat(x)),
            Raw::Str(s) => match s.as_str() {
                "nan" => Ok(JsonFloat(f64::NAN)),
                "inf" => Ok(JsonFloat(f64::INFINITY)),
                "-inf" => Ok(JsonFloat(f64::NEG_INFINITY)),
                other => Err(D::Error::custom(format!(
                    "`{other}` is not a float (non-finite values are \"nan\", \"inf\", \"-inf\")"
                ))),
            },
        }
    }
}

impl Serialize for JsonFloat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_nan() {
            s.serialize_str("nan")
        } else if x.is_infinite() {
            s.serialize_str(if x > 0.0 { "inf" } else { "-inf" })
        } else {
            s.serialize_f64(x)
        }
    }
}

/// An argument, keyword argument or non-tensor output value, tagged by its type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// A tensor stored in the file under this name.
    Tensor(String),
    /// A list of optional tensors.
    Tensors(Vec<Option<String>>),
    Int(i64),
    Float(JsonFloat),
    Bool(bool),
    Complex([JsonFloat; 2]),
    Ints(Vec<i64>),
    Floats(Vec<JsonFloat>),
    Bools(Vec<bool>),
    /// A torch dtype by golden name (`f64`, `c128` may appear as arguments).
    Dtype(String),
    Str(String),
    Layout(String),
    Device(String),
    MemoryFormat(String),
    None(()),
}

impl Value {
    /// Names of the tensors this value refers to.
    pub fn tensor_names(&self) -> Vec<&str> {
        match self {
            Value::Tensor(t) => vec![t.as_str()],
            Value::Tensors(ts) => ts.iter().flatten().map(|t| t.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Value::None(()))
    }
}

/// How an op was called: positional arguments and keyword arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpCall {
    pub args: Vec<Value>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
}

impl OpCall {
    /// The argument named `name` in the schema, passed either by keyword or at position `pos`
    /// ([`KEYWORD_ONLY`]: by keyword only).
    pub fn arg(&self, pos: usize, name: &str) -> Option<&Value> {
        self.kwargs.get(name).or_else(|| self.args.get(pos))
    }
}

// ---------------------------------------------------------------------------------------------
// Typed argument accessors
//
// A lowering reads its arguments through [`LowerRequest::arg`], [`LowerRequest::opt`] and
// [`LowerRequest::arg_or`], naming the schema position and name, with the Rust type saying which
// argument values are accepted ([`FromArg`]). Every malformed argument is the same
// [`LowerError::Invalid`], naming the op, the argument and what was wrong
// (``op: invalid call: argument 2 `dim`: got Str("x"), expected an int``).

/// The position of a keyword-only argument (`*, ScalarType? dtype`): it is read from the
/// keyword arguments only.
pub const KEYWORD_ONLY: usize = usize::MAX;

/// A Python scalar argument (schema `Scalar`): a bool, an int or a float. A complex scalar is a
/// valid `Scalar` that no lowering takes: reading one is [`LowerError::Unsupported`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

/// An int argument that also takes a bool as 0 or 1 (Python's bool is an int, and `torch.ops`
/// converts it). The plain `i64` accessor takes ints only; the lowerings that have always
/// accepted a bool for an int read this type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntOrBool(pub i64);

impl From<IntOrBool> for i64 {
    fn from(v: IntOrBool) -> i64 {
        v.0
    }
}

/// A bool argument that also takes an int by its truth (`torch.ops` converts it). The plain
/// `bool` accessor takes bools only; the lowerings that have always accepted an int for a bool
/// read this type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoolOrInt(pub bool);

/// An int list argument that also takes one int as the list of it (`dim=1` for `dim=[1]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntOrList(pub Vec<i64>);

/// A number argument that may be complex: `(real, imaginary)`, a real number with imaginary
/// part 0 (a fill or pad value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Complex(pub f64, pub f64);

/// A memory format argument by name (`contiguous_format`, `channels_last`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryFormat<'a>(pub &'a str);

/// A tensor argument: its name in the case and its metadata.
pub type TensorArg<'a> = (&'a str, &'a TensorMeta);

/// An argument that is either a tensor or a Python scalar (`where`, `clamp`, `pow`, …).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TensorOrScalar<'a> {
    Tensor(&'a str, &'a TensorMeta),
    Scalar(Scalar),
}

/// A Rust type an argument value converts to: which [`Value`]s it accepts.
pub trait FromArg<'a>: Sized {
    /// What the type is called in an error (`an int`).
    const EXPECTED: &'static str;
    /// The converted value; `Ok(None)` when `v` has another type. Errors other than a type
    /// mismatch (a tensor without metadata, a complex scalar) are returned as they are.
    fn from_value(v: &'a Value, req: &LowerRequest<'a>) -> Result<Option<Self>, LowerError>;
}

/// Implements [`FromArg`] for a type whose values convert without failing: `v` is the value,
/// the body its conversion (`None`: another type).
macro_rules! from_value {
    ($ty:ty, $expected:literal, |$v:ident| $body:expr) => {
        impl<'a> FromArg<'a> for $ty {
            const EXPECTED: &'static str = $expected;
            fn from_value($v: &'a Value, _: &LowerRequest<'a>) -> Result<Option<Self>, LowerError> {
                Ok($body)
            }
        }
    };
}

from_value!(i64, "an int", |v| match v {
    Value::Int(i) => Some(*i),
    _ => None,
});

from_value!(IntOrBool, "an int", |v| match v {
    Value::Int(i) => Some(IntOrBool(*i)),
    Value::Bool(b) => Some(IntOrBool(*b as i64)),
    _ => None,
});

from_value!(bool, "a bool", |v| match v {
    Value::Bool(b) => Some(*b),
    _ => None,
});

from_value!(BoolOrInt, "a bool", |v| match v {
    Value::Bool(b) => Some(BoolOrInt(*b)),
    Value::Int(i) => Some(BoolOrInt(*i != 0)),
    _ => None,
});

// Schema `float`: a float, or an int as its value.
from_value!(f64, "a float", |v| match v {
    Value::Float(f) => Some(f.0),
    Value::Int(i) => Some(*i as f64),
    _ => None,
});

impl<'a> FromArg<'a> for Scalar {
    const EXPECTED: &'static str = "a number";
    fn from_value(v: &'a Value, req: &LowerRequest<'a>) -> Result<Option<Self>, LowerError> {
        Ok(match v {
            Value::Bool(b) => Some(Scalar::Bool(*b)),
            Value::Int(i) => Some(Scalar::Int(*i)),
            Value::Float(f) => Some(Scalar::Float(f.0)),
            Value::Complex(_) => return Err(req.unsupported("complex scalars".into())),
            _ => None,
        })
    }
}

from_value!(Complex, "a number", |v| match v {
    Value::Complex([re, im]) => Some(Complex(re.0, im.0)),
    Value::Float(f) => Some(Complex(f.0, 0.0)),
    Value::Int(i) => Some(Complex(*i as f64, 0.0)),
    Value::Bool(b) => Some(Complex(*b as i64 as f64, 0.0)),
    _ => None,
});

from_value!(Vec<i64>, "an int list", |v| match v {
    Value::Ints(v) => Some(v.clone()),
    _ => None,
});

from_value!(IntOrList, "an int list", |v| match v {
    Value::Ints(v) => Some(IntOrList(v.clone())),
    Value::Int(i) => Some(IntOrList(vec![*i])),
    _ => None,
});

from_value!(Vec<bool>, "a bool list", |v| match v {
    Value::Bools(v) => Some(v.clone()),
    _ => None,
});

from_value!(Vec<f64>, "a float list", |v| match v {
    Value::Floats(v) => Some(v.iter().map(|f| f.0).collect()),
    _ => None,
});

from_value!(&'a str, "a string", |v| match v {
    Value::Str(s) => Some(s.as_str()),
    _ => None,
});

from_value!(MemoryFormat<'a>, "a memory format", |v| match v {
    Value::MemoryFormat(f) => Some(MemoryFormat(f.as_str())),
    _ => None,
});

/// A dtype by golden name; a name with no [`TorchDType`] is unsupported.
impl<'a> FromArg<'a> for TorchDType {
    const EXPECTED: &'static str = "a dtype";
    fn from_value(v: &'a Value, req: &LowerRequest<'a>) -> Result<Option<Self>, LowerError> {
        match v {
            Value::Dtype(d) => TorchDType::from_name(d)
                .map(Some)
                .ok_or_else(|| req.unsupported(format!("dtype {d}"))),
            _ => Ok(None),
        }
    }
}

impl<'a> FromArg<'a> for TensorArg<'a> {
    const EXPECTED: &'static str = "a tensor";
    fn from_value(v: &'a Value, req: &LowerRequest<'a>) -> Result<Option<Self>, LowerError> {
        match v {
            Value::Tensor(t) => Ok(Some((t.as_str(), req.tensor(t)?))),
            _ => Ok(None),
        }
    }
}

// A list of optional tensors, by name (their metadata is looked up where they are used).
from_value!(&'a [Option<String>], "a tensor list", |v| match v {
    Value::Tensors(ts) => Some(ts.as_slice()),
    _ => None,
});

impl<'a> FromArg<'a> for TensorOrScalar<'a> {
    const EXPECTED: &'static str = "a tensor or a number";
    fn from_value(v: &'a Value, req: &LowerRequest<'a>) -> Result<Option<Self>, LowerError> {
        if let Value::Tensor(t) = v {
            return Ok(Some(TensorOrScalar::Tensor(t.as_str(), req.tensor(t)?)));
        }
        Ok(Scalar::from_value(v, req)?.map(TensorOrScalar::Scalar))
    }
}

impl<'a> LowerRequest<'a> {
    /// Required argument `name` at schema position `pos` (or by keyword): absent, `None` or of
    /// another type is an error.
    pub fn arg<T: FromArg<'a>>(&self, pos: usize, name: &str) -> Result<T, LowerError> {
        match self.call.arg(pos, name) {
            None => Err(self.arg_error(pos, name, "missing")),
            Some(v) => self.convert(pos, name, v),
        }
    }

    /// Optional argument: `None` when absent or passed as `None`, an error when of another type.
    pub fn opt<T: FromArg<'a>>(&self, pos: usize, name: &str) -> Result<Option<T>, LowerError> {
        match self.call.arg(pos, name) {
            None | Some(Value::None(())) => Ok(None),
            Some(v) => self.convert(pos, name, v).map(Some),
        }
    }

    /// Argument with a default: `default` when absent or passed as `None`.
    pub fn arg_or<T: FromArg<'a>>(&self, pos: usize, name: &str, default: T) -> Result<T, LowerError> {
        Ok(self.opt(pos, name)?.unwrap_or(default))
    }

    /// Dim `d` of argument `name` wrapped like PyTorch's `maybe_wrap_dim`: `-rank..rank`, and a
    /// 0-d tensor takes dims -1 and 0.
    pub fn wrap_dim(&self, pos: usize, name: &str, d: i64, rank: usize) -> Result<usize, LowerError> {
        let n = rank.max(1) as i64;
        let w = if d < 0 { d + n } else { d };
        if w < 0 || w >= n {
            return Err(self.arg_error(pos, name, format!("dim {d} is out of range for a {rank}-d tensor")));
        }
        Ok(w as usize)
    }

    /// Required int argument `name` as a dim of a `rank`-d tensor ([`Self::wrap_dim`]).
    pub fn dim(&self, pos: usize, name: &str, rank: usize) -> Result<usize, LowerError> {
        let d = self.arg::<i64>(pos, name)?;
        self.wrap_dim(pos, name, d, rank)
    }

    /// Int argument `name` as a dim of a `rank`-d tensor, `default` when absent or `None`.
    pub fn dim_or<T: FromArg<'a> + Into<i64>>(
        &self,
        pos: usize,
        name: &str,
        default: T,
        rank: usize,
    ) -> Result<usize, LowerError> {
        let d = self.arg_or(pos, name, default)?.into();
        self.wrap_dim(pos, name, d, rank)
    }

    /// Required `int[n]` argument (`stride`, `padding`, …): an int list of length `n`, or one
    /// int (or a list of one) standing for `n` copies, as PyTorch broadcasts it.
    pub fn ints_n(&self, pos: usize, name: &str, n: usize) -> Result<Vec<i64>, LowerError> {
        let IntOrList(v) = self.arg(pos, name)?;
        self.broadcast_n(pos, name, v, n)
    }

    /// Required `int[n]` argument of sizes (`stride`, `dilation`, …): [`Self::ints_n`], none
    /// negative.
    pub fn sizes_n(&self, pos: usize, name: &str, n: usize) -> Result<Vec<usize>, LowerError> {
        self.ints_n(pos, name, n)?
            .into_iter()
            .map(|x| usize::try_from(x).map_err(|_| self.arg_error(pos, name, format!("{x} is negative"))))
            .collect()
    }

    /// Optional `int[n]` argument: `default` when absent, `None` or the empty list (PyTorch's
    /// pools read `stride=[]` as "the kernel size"), broadcast to `n` like [`Self::ints_n`].
    pub fn ints_n_or(&self, pos: usize, name: &str, n: usize, default: &[i64]) -> Result<Vec<i64>, LowerError> {
        let v = match self.opt::<IntOrList>(pos, name)? {
            Some(IntOrList(v)) if !v.is_empty() => v,
            _ => default.to_vec(),
        };
        self.broadcast_n(pos, name, v, n)
    }

    fn broadcast_n(&self, pos: usize, name: &str, v: Vec<i64>, n: usize) -> Result<Vec<i64>, LowerError> {
        match v.len() {
            1 => Ok(vec![v[0]; n]),
            l if l == n => Ok(v),
            _ => Err(self.arg_error(pos, name, format!("got {v:?}, expected 1 or {n} ints"))),
        }
    }

    /// The error for argument `name` at `pos` whose value is wrong (`what`): every argument
    /// error reads the same way, the accessors' own and a lowering's value checks.
    pub fn arg_error(&self, pos: usize, name: &str, what: impl std::fmt::Display) -> LowerError {
        let at = if pos == KEYWORD_ONLY {
            format!("keyword argument `{name}`")
        } else {
            format!("argument {pos} `{name}`")
        };
        self.invalid(format!("{at}: {what}"))
    }

    fn convert<T: FromArg<'a>>(&self, pos: usize, name: &str, v: &'a Value) -> Result<T, LowerError> {
        T::from_value(v, self)?.ok_or_else(|| self.arg_error(pos, name, format!("got {v:?}, expected {}", T::EXPECTED)))
    }
}

/// Metadata of one stored tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMeta {
    pub dtype: TorchDType,
    pub shape: Vec<usize>,
    /// Strides the tensor had in PyTorch (informational: data is stored contiguous).
    #[serde(default)]
    pub strides: Option<Vec<i64>>,
    /// Storage offset the tensor had in PyTorch (informational, like `strides`).
    #[serde(default)]
    pub storage_offset: Option<i64>,
}

impl TensorMeta {
    /// Metadata of a contiguous tensor (no recorded strides or storage offset), as lowering
    /// tests and benchmarks build calls.
    pub fn contiguous(dtype: TorchDType, shape: &[usize]) -> TensorMeta {
        TensorMeta {
            dtype,
            shape: shape.to_vec(),
            strides: None,
            storage_offset: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OutputSlot;

    /// A request for `op` with `args`/`kwargs` and one stored tensor `input.0` (f32 [2, 3]).
    struct Fixture {
        call: OpCall,
        tensors: BTreeMap<String, TensorMeta>,
    }

    impl Fixture {
        fn new(args: Vec<Value>) -> Fixture {
            let mut tensors = BTreeMap::new();
            tensors.insert("input.0".to_string(), TensorMeta::contiguous(TorchDType::F32, &[2, 3]));
            Fixture {
                call: OpCall {
                    args,
                    kwargs: BTreeMap::new(),
                },
                tensors,
            }
        }

        fn kwarg(mut self, name: &str, v: Value) -> Fixture {
            self.call.kwargs.insert(name.into(), v);
            self
        }

        fn req(&self) -> LowerRequest<'_> {
            LowerRequest {
                op: "some.op",
                call: &self.call,
                tensors: &self.tensors,
                outputs: &[] as &[OutputSlot],
            }
        }
    }

    fn invalid(e: LowerError) -> String {
        match e {
            LowerError::Invalid { op, reason } => {
                assert_eq!(op, "some.op");
                reason
            }
            other => panic!("expected an invalid-call error, got {other:?}"),
        }
    }

    fn float(x: f64) -> Value {
        Value::Float(JsonFloat(x))
    }

    #[test]
    fn positional_and_keyword_arguments_are_read_by_type() {
        let f = Fixture::new(vec![Value::Tensor("input.0".into()), Value::Int(-1), Value::Bool(true)])
            .kwarg("eps", float(0.5))
            .kwarg("dtype", Value::Dtype("bf16".into()));
        let r = f.req();
        let (name, meta) = r.arg::<TensorArg>(0, "self").unwrap();
        assert_eq!((name, meta.shape.as_slice()), ("input.0", &[2, 3][..]));
        assert_eq!(r.arg::<i64>(1, "dim").unwrap(), -1);
        assert!(r.arg::<bool>(2, "keepdim").unwrap());
        // A keyword wins over the position; a keyword-only argument has no position.
        assert_eq!(r.arg::<f64>(1, "eps").unwrap(), 0.5);
        assert_eq!(r.arg::<TorchDType>(KEYWORD_ONLY, "dtype").unwrap(), TorchDType::Bf16);
    }

    #[test]
    fn a_missing_required_argument_is_named() {
        let f = Fixture::new(vec![]);
        let reason = invalid(f.req().arg::<i64>(3, "groups").unwrap_err());
        assert_eq!(reason, "argument 3 `groups`: missing");
        let reason = invalid(f.req().arg::<TorchDType>(KEYWORD_ONLY, "dtype").unwrap_err());
        assert_eq!(reason, "keyword argument `dtype`: missing");
    }

    #[test]
    fn none_for_a_required_argument_is_a_type_error() {
        let f = Fixture::new(vec![Value::None(())]);
        let reason = invalid(f.req().arg::<i64>(0, "n").unwrap_err());
        assert_eq!(reason, "argument 0 `n`: got None(()), expected an int");
    }

    #[test]
    fn every_type_rejects_a_value_of_another_type() {
        let f = Fixture::new(vec![Value::Str("x".into())]);
        let r = f.req();
        let expect = |e: LowerError, what: &str| {
            assert_eq!(invalid(e), format!("argument 0 `a`: got Str(\"x\"), expected {what}"));
        };
        expect(r.arg::<i64>(0, "a").unwrap_err(), "an int");
        expect(r.arg::<IntOrBool>(0, "a").unwrap_err(), "an int");
        expect(r.arg::<bool>(0, "a").unwrap_err(), "a bool");
        expect(r.arg::<BoolOrInt>(0, "a").unwrap_err(), "a bool");
        expect(r.arg::<f64>(0, "a").unwrap_err(), "a float");
        expect(r.arg::<Scalar>(0, "a").unwrap_err(), "a number");
        expect(r.arg::<Complex>(0, "a").unwrap_err(), "a number");
        expect(r.arg::<Vec<i64>>(0, "a").unwrap_err(), "an int list");
        expect(r.arg::<IntOrList>(0, "a").unwrap_err(), "an int list");
        expect(r.arg::<Vec<bool>>(0, "a").unwrap_err(), "a bool list");
        expect(r.arg::<Vec<f64>>(0, "a").unwrap_err(), "a float list");
        expect(r.arg::<MemoryFormat>(0, "a").unwrap_err(), "a memory format");
        expect(r.arg::<TorchDType>(0, "a").unwrap_err(), "a dtype");
        expect(r.arg::<TensorArg>(0, "a").unwrap_err(), "a tensor");
        expect(r.arg::<&[Option<String>]>(0, "a").unwrap_err(), "a tensor list");
        expect(r.arg::<TensorOrScalar>(0, "a").unwrap_err(), "a tensor or a number");
        let f = Fixture::new(vec![Value::Int(1)]);
        let reason = invalid(f.req().arg::<&str>(0, "a").unwrap_err());
        assert_eq!(reason, "argument 0 `a`: got Int(1), expected a string");
    }

    #[test]
    fn strict_types_refuse_what_the_lenient_ones_convert() {
        let f = Fixture::new(vec![Value::Bool(true), Value::Int(0), Value::Int(4), float(1.5)]);
        let r = f.req();
        assert!(r.arg::<i64>(0, "a").is_err());
        assert_eq!(r.arg::<IntOrBool>(0, "a").unwrap(), IntOrBool(1));
        assert!(r.arg::<bool>(1, "b").is_err());
        assert_eq!(r.arg::<BoolOrInt>(1, "b").unwrap(), BoolOrInt(false));
        assert_eq!(r.arg::<BoolOrInt>(2, "b").unwrap(), BoolOrInt(true));
        assert!(r.arg::<Vec<i64>>(2, "c").is_err());
        assert_eq!(r.arg::<IntOrList>(2, "c").unwrap(), IntOrList(vec![4]));
        // Schema `float` takes an int, not a bool; `Scalar` takes all three.
        assert_eq!(r.arg::<f64>(2, "c").unwrap(), 4.0);
        assert!(r.arg::<f64>(0, "a").is_err());
        assert!(r.arg::<i64>(3, "d").is_err());
        assert_eq!(r.arg::<Scalar>(0, "a").unwrap(), Scalar::Bool(true));
        assert_eq!(r.arg::<Scalar>(3, "d").unwrap(), Scalar::Float(1.5));
        assert_eq!(r.arg::<Complex>(2, "c").unwrap(), Complex(4.0, 0.0));
    }

    #[test]
    fn optional_arguments_and_defaults() {
        let f = Fixture::new(vec![Value::None(()), Value::Int(7)]);
        let r = f.req();
        assert_eq!(r.opt::<i64>(0, "a").unwrap(), None);
        assert_eq!(r.opt::<i64>(5, "absent").unwrap(), None);
        assert_eq!(r.opt::<i64>(1, "b").unwrap(), Some(7));
        assert_eq!(r.arg_or(0, "a", 3i64).unwrap(), 3);
        assert_eq!(r.arg_or(1, "b", 3i64).unwrap(), 7);
        // A present value of another type is an error, not the default.
        let reason = invalid(r.arg_or(1, "b", false).unwrap_err());
        assert_eq!(reason, "argument 1 `b`: got Int(7), expected a bool");
        let reason = invalid(r.opt::<bool>(1, "b").unwrap_err());
        assert_eq!(reason, "argument 1 `b`: got Int(7), expected a bool");
    }

    #[test]
    fn a_tensor_without_metadata_is_an_error() {
        let f = Fixture::new(vec![Value::Tensor("input.9".into())]);
        let reason = invalid(f.req().arg::<TensorArg>(0, "self").unwrap_err());
        assert_eq!(reason, "no metadata for tensor `input.9`");
        let reason = invalid(f.req().arg::<TensorOrScalar>(0, "self").unwrap_err());
        assert_eq!(reason, "no metadata for tensor `input.9`");
    }

    #[test]
    fn complex_scalars_and_unknown_dtypes_are_unsupported() {
        let f = Fixture::new(vec![
            Value::Complex([JsonFloat(1.0), JsonFloat(2.0)]),
            Value::Dtype("f128".into()),
        ]);
        let r = f.req();
        assert!(matches!(
            r.arg::<Scalar>(0, "other"),
            Err(LowerError::Unsupported { .. })
        ));
        assert!(matches!(
            r.arg::<TensorOrScalar>(0, "other"),
            Err(LowerError::Unsupported { .. })
        ));
        assert_eq!(r.arg::<Complex>(0, "value").unwrap(), Complex(1.0, 2.0));
        assert!(matches!(
            r.arg::<TorchDType>(1, "dtype"),
            Err(LowerError::Unsupported { .. })
        ));
    }

    #[test]
    fn dims_wrap_like_pytorch_and_out_of_range_is_named() {
        let f = Fixture::new(vec![Value::Int(-1), Value::Int(3), Value::Int(-4)]);
        let r = f.req();
        assert_eq!(r.dim(0, "dim", 3).unwrap(), 2);
        // A 0-d tensor takes dims -1 and 0.
        assert_eq!(r.dim(0, "dim", 0).unwrap(), 0);
        assert_eq!(r.wrap_dim(9, "dims", 0, 0).unwrap(), 0);
        let reason = invalid(r.dim(1, "dim", 3).unwrap_err());
        assert_eq!(reason, "argument 1 `dim`: dim 3 is out of range for a 3-d tensor");
        let reason = invalid(r.dim(2, "dim", 3).unwrap_err());
        assert_eq!(reason, "argument 2 `dim`: dim -4 is out of range for a 3-d tensor");
        let reason = invalid(r.wrap_dim(1, "dims", 1, 0).unwrap_err());
        assert_eq!(reason, "argument 1 `dims`: dim 1 is out of range for a 0-d tensor");
        // With a default: absent or None is the default, wrapped like a given dim.
        let f = Fixture::new(vec![Value::None(()), Value::Bool(true), Value::Int(5)]);
        let r = f.req();
        assert_eq!(r.dim_or(0, "dim", -1i64, 3).unwrap(), 2);
        assert_eq!(r.dim_or(7, "dim", 0i64, 3).unwrap(), 0);
        assert_eq!(r.dim_or(1, "dim", IntOrBool(0), 3).unwrap(), 1);
        assert!(r.dim_or(1, "dim", 0i64, 3).is_err());
        let reason = invalid(r.dim_or(2, "dim", 0i64, 3).unwrap_err());
        assert_eq!(reason, "argument 2 `dim`: dim 5 is out of range for a 3-d tensor");
    }

    #[test]
    fn fixed_length_int_lists_broadcast_one_int() {
        let f = Fixture::new(vec![
            Value::Int(2),
            Value::Ints(vec![3]),
            Value::Ints(vec![1, 2]),
            Value::Ints(vec![1, 2, 3]),
            Value::Ints(vec![]),
            Value::None(()),
        ]);
        let r = f.req();
        assert_eq!(r.ints_n(0, "stride", 2).unwrap(), vec![2, 2]);
        assert_eq!(r.ints_n(1, "stride", 2).unwrap(), vec![3, 3]);
        assert_eq!(r.ints_n(2, "stride", 2).unwrap(), vec![1, 2]);
        let reason = invalid(r.ints_n(3, "stride", 2).unwrap_err());
        assert_eq!(reason, "argument 3 `stride`: got [1, 2, 3], expected 1 or 2 ints");
        let reason = invalid(r.ints_n(4, "stride", 2).unwrap_err());
        assert_eq!(reason, "argument 4 `stride`: got [], expected 1 or 2 ints");
        assert!(r.ints_n(5, "stride", 2).is_err());
        // The defaulted form: absent, None and [] are the default, which broadcasts too.
        assert_eq!(r.ints_n_or(4, "stride", 2, &[5, 6]).unwrap(), vec![5, 6]);
        assert_eq!(r.ints_n_or(5, "stride", 2, &[0]).unwrap(), vec![0, 0]);
        assert_eq!(r.ints_n_or(9, "stride", 2, &[0]).unwrap(), vec![0, 0]);
        assert_eq!(r.ints_n_or(0, "stride", 2, &[0]).unwrap(), vec![2, 2]);
        assert!(r.ints_n_or(3, "stride", 2, &[0]).is_err());
        // Sizes: the same, none negative.
        assert_eq!(r.sizes_n(2, "stride", 2).unwrap(), vec![1, 2]);
        let f = Fixture::new(vec![Value::Ints(vec![1, -2])]);
        let reason = invalid(f.req().sizes_n(0, "padding", 2).unwrap_err());
        assert_eq!(reason, "argument 0 `padding`: -2 is negative");
    }

    #[test]
    fn lists_strings_and_formats() {
        let f = Fixture::new(vec![
            Value::Bools(vec![true, false]),
            Value::Floats(vec![JsonFloat(2.0)]),
            Value::Tensors(vec![Some("input.0".into()), None]),
            Value::Str("tanh".into()),
            Value::MemoryFormat("channels_last".into()),
            Value::Tensor("input.0".into()),
        ]);
        let r = f.req();
        assert_eq!(r.arg::<Vec<bool>>(0, "output_mask").unwrap(), vec![true, false]);
        assert_eq!(r.arg::<Vec<f64>>(1, "scale_factors").unwrap(), vec![2.0]);
        assert_eq!(r.arg::<&[Option<String>]>(2, "indices").unwrap().len(), 2);
        assert_eq!(r.arg::<&str>(3, "approximate").unwrap(), "tanh");
        assert_eq!(
            r.arg::<MemoryFormat>(4, "memory_format").unwrap(),
            MemoryFormat("channels_last")
        );
        assert!(matches!(
            r.arg::<TensorOrScalar>(5, "self").unwrap(),
            TensorOrScalar::Tensor("input.0", _)
        ));
    }
}
