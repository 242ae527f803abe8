"""OVERWORLD: a small top-down RPG built from Python source, the default workload (docs/overworld.md)."""

from gbxcule.roms.overworld.game import ADDR, OVERWORLD, STATE

__all__ = ["ADDR", "OVERWORLD", "STATE"]
