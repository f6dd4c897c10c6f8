//! The ATen-call vocabulary a lowering reads: argument values ([`Value`]), calls ([`OpCall`]) and
//! tensor metadata ([`TensorMeta`]), in the golden value encoding (docs/golden-format.md). The
//! harness's golden loader and the PyTorch device both speak it; neither tensor values nor
//! golden outputs appear here.

use crate::dtype::TorchDType;
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
    /// The argument named `name` in the schema, passed either by keyword or at position `pos`.
    pub fn arg(&self, pos: usize, name: &str) -> Option<&Value> {
        self.kwargs.get(name).or_else(|| self.args.get(pos))
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
