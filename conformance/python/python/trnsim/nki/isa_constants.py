"""`nki.isa.constants` / `neuronxcc.nki.isa.constants`: the enumerations of the ISA calls
(`from nki.isa.constants import oob_mode`), the same objects as `nisa.engine`, `nisa.oob_mode`, ..."""

from .isa import dge_mode, engine, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "engine", "nc_version", "oob_mode", "reduce_cmd"]
