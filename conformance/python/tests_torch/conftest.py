"""Tests of the trnsim PyTorch device. They need torch: `.ci/run` provides the pinned torch in a
venv (`.ci/torch-venv`) and `cargo test` runs them (tests/python.rs); docs/torch-device.md."""

import pytest

torch = pytest.importorskip("torch")
