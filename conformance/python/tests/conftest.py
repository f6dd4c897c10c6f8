"""pytest configuration for the trnsim package's tests: makes tests/ importable (programs.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
