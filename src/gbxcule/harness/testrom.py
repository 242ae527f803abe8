"""Running third-party test ROMs and judging them by their own protocols.

- blargg: the text a ROM sends over serial ("Passed" / "Failed"), or its result block in cartridge RAM:
  signature DE B0 61 at 0xA001, status at 0xA000 (0x80 while running, 0 when passed), text from 0xA004.
- mooneye: the ROM finishes with `LD B,B` holding B,C,D,E,H,L = 3,5,8,13,21,34 on success and 0x42 in
  all six on failure; the registers are read at step boundaries, after the ROM has stopped in its loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gbxcule.backends import load_start_state, make_backend
from gbxcule.core.schedule import ActionSchedule

MOONEYE_PASS = (3, 5, 8, 13, 21, 34)
MOONEYE_FAIL = (0x42,) * 6
BLARGG_SIGNATURE = bytes([0xDE, 0xB0, 0x61])


@dataclass
class TestRomResult:
    passed: bool
    decided: bool  # False when the frame limit ran out before the ROM reported
    protocol: str  # "blargg-serial", "blargg-memory", "mooneye" or "none"
    frames: int
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


def _blargg_memory(backend) -> tuple[bool, bool, str] | None:
    head = bytes(backend.read_memory(0, 0xA000, 0xA004))
    if head[1:4] != BLARGG_SIGNATURE or head[0] == 0x80:
        return None
    raw = bytes(backend.read_memory(0, 0xA004, 0xA004 + 1024))
    text = raw.split(b"\0", 1)[0].decode("latin-1")
    return head[0] == 0, True, text


def _judge(backend) -> tuple[bool, bool, str, str] | None:
    s = backend.get_cpu_state(0)
    regs = (s.b, s.c, s.d, s.e, s.h, s.l)
    if regs == MOONEYE_PASS:
        return True, True, "mooneye", "B C D E H L = 3 5 8 13 21 34"
    if regs == MOONEYE_FAIL:
        return False, True, "mooneye", "B C D E H L = 42 42 42 42 42 42"
    serial = backend.serial_bytes(0).decode("latin-1")
    if "Passed" in serial:
        return True, True, "blargg-serial", serial
    if "Failed" in serial:
        return False, True, "blargg-serial", serial
    mem = _blargg_memory(backend)
    if mem:
        return mem[0], mem[1], "blargg-memory", mem[2]
    return None


def run_test_rom(rom, backend_name: str = "warp_vec_cpu", frames: int = 3600, check_every: int = 30,
                 boot: str = "pyboy", state=None) -> TestRomResult:
    schedule = ActionSchedule(check_every, 0)
    extra = {"boot": boot} if backend_name.startswith("warp") else {}
    if boot != "pyboy" and not extra:
        raise ValueError(f"--boot {boot} needs a warp backend; PyBoy always runs its own boot ROM")
    backend = make_backend(backend_name, rom, num_envs=1, codec="dmg_buttons_v0", schedule=schedule, **extra)
    try:
        backend.reset(0)
        if state:
            load_start_state(backend, state)
        done = 0
        while done < frames:
            backend.step(np.zeros(1, dtype=np.int32))
            done += check_every
            verdict = _judge(backend)
            if verdict:
                passed, decided, protocol, text = verdict
                return TestRomResult(passed, decided, protocol, done, text)
        return TestRomResult(False, False, "none", done, backend.serial_bytes(0).decode("latin-1"))
    finally:
        backend.close()
