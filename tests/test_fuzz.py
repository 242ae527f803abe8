"""Fuzz the step kernel on the CPU device: random and instruction-biased ROMs, a few frames each.

The ROM generator and invariant checks are scripts/check/fuzz_gpu.py's (the long GPU run); CI runs 4 ROMs with
the normal kernel, and 2 ROMs with the kernels compiled in Warp's debug mode (bounds checks on every array
access) in a subprocess: about 30 s on 2 cores with a cold cache (docs/verification.md).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check" / "fuzz_gpu.py"
spec = importlib.util.spec_from_file_location("fuzz_gpu", SCRIPT)
fuzz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fuzz)


def test_fuzz_roms_have_valid_headers_and_differ():
    from gbxcule.core.cartridge import check_runnable, parse_header

    roms = [fuzz.fuzz_rom(s, k) for s in range(3) for k in ("random", "biased")]
    for data in roms:
        info = parse_header(data)
        check_runnable(info)
        assert info.header_checksum_valid and info.global_checksum_valid
    assert len(set(roms)) == len(roms)


@pytest.mark.parametrize("seed,kind", [(0, "random"), (1, "biased"), (2, "random"), (3, "biased")])
def test_fuzz_cpu(seed, kind):
    r = fuzz.fuzz_one(seed, kind, "cpu", envs=4, steps=3, frames=2)
    assert r["ok"], r["problems"]


def test_invariant_check_catches_out_of_range_registers():
    class S:
        a, f, b, c, d, e, h, l, sp, pc = 0x100, 0, 0, 0, 0, 0, 0, 0, 0, 0x10000

    class B:
        def get_cpu_state(self, env):
            return S()

    assert fuzz.check_invariants(B(), 1) == ["env 0: a=256", "env 0: sp=0 pc=65536"]


def test_fuzz_cpu_debug_mode(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--roms", "2", "--envs", "2", "--steps",
                        "2", "--frames-per-step", "2", "--debug"], capture_output=True, text=True, timeout=3600,
                       env=os.environ | {"OUT": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2/2 ROMs ok on cpu (debug mode)" in r.stdout
