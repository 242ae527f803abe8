"""`RomSpec`: a built-in ROM and its manifest entry; `VerifySettings`: how `gbxcule verify` runs it.

Every ROM module defines its `RomSpec`s from this module; `gbxcule.roms` collects them into the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class VerifySettings:
    """How `gbxcule verify` is meant to exercise a ROM."""

    frames_per_step: int = 1
    release_after_frames: int = 1
    steps: int = 2000
    actions: str = "seeded_random"


@dataclass(frozen=True)
class RomSpec:
    """A built-in ROM and its manifest entry."""

    name: str
    description: str
    covers: tuple[str, ...]
    source: Callable[[], str]  # assembly text
    header: Callable[[], object]  # -> gbxcule.asm.CartridgeHeader
    frames: int  # frames (from power-on, no buttons) after which the signature holds
    signature: Callable[[], dict[int, bytes]]  # address -> expected bytes there
    verify: VerifySettings = field(default_factory=VerifySettings)

    def build(self):
        """Assemble the ROM; returns gbxcule.asm.AsmResult."""
        from gbxcule.asm import assemble

        return assemble(self.source(), header=self.header(), name=self.name)

    def manifest(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "covers": list(self.covers),
            "frames": self.frames,
            "verify": self.verify.__dict__,
            "signature": {f"{addr:04X}": data.hex() for addr, data in sorted(self.signature().items())},
        }
