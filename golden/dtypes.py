"""The golden format's dtype names (docs/golden-format.md, "Dtype names") and their torch dtypes,
shared by the generator and both replays."""

import torch

# Every dtype a stored tensor may have.
STORED = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f8e4m3fn": torch.float8_e4m3fn,
    "f8e5m2": torch.float8_e5m2,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
    "c64": torch.complex64,
}

# Every dtype a call argument may name: the stored ones and the 64-bit float and complex dtypes.
NAMED = {**STORED, "f64": torch.float64, "c128": torch.complex128}
