"""Lockstep against PyBoy on every micro-ROM: warp_vec_cpu must leave PyBoy's exact state after every step.

CI runs each ROM for a few hundred single-frame steps with seeded random buttons and a few dozen 24-frame
steps with striped buttons; `gbxcule verify` runs the full 2,000-step checks (see docs/verification.md).
"""

import pytest

from gbxcule.core.cartridge import load_rom
from gbxcule.harness.verify import VerifyConfig, run_verify
from gbxcule.roms import resolve_rom, suite

NAMES = list(suite())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fps, steps, actions", [(1, 150, "seeded_random"), (24, 12, "striped")])
def test_micro_rom_lockstep(name, fps, steps, actions, tmp_path):
    rom = load_rom(resolve_rom(name))
    cfg = VerifyConfig(rom=name, steps=steps, frames_per_step=fps, release_after_frames=min(8, fps),
                       actions=actions, seed=7, bundle_dir=str(tmp_path))
    result = run_verify(cfg, rom)
    assert result.ok, "\n".join(result.differences[:20])
