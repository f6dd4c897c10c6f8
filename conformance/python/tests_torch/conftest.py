"""Tests of the trnsim PyTorch device. They need torch and run only in
.github/workflows/torch-device.yml (docs/torch-device.md), never under `.ci/run`."""

import pytest

torch = pytest.importorskip("torch")
