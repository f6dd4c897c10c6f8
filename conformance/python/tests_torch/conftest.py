"""Tests of the trnsim PyTorch device. They need torch: `.ci/run` provides the pinned torch in a
venv (`.ci/torch-venv`) and `cargo test` runs them (tests/python.rs); docs/torch-device.md."""

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def fresh_device():
    """The `trnsim` device with the CPU fallback off and an empty report, as a test starts."""
    import trnsim.torch

    trnsim.torch.set_fallback(False)
    trnsim.torch.reset_report()
