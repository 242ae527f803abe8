"""Warp kernels: each GPU (or CPU) thread is one complete Game Boy.

Importing this package configures Warp for gbxcule: kernel cache in the project cache folder, no
gradient code, no start-up banner on stdout. `state.py` is the state schema, `bus.py` the memory map,
`cpu.py` + `instructions.py` the SM83, `timer.py`, `ppu.py`, `mbc.py` the rest of the machine, `frame.py` a frame's
CPU batches and events, `step.py` the step kernel, and `gen.py` the instruction dispatch and field-wise code it
generates from the ISA table and the schema. Around the step: `slots.py` (whole env states copied between
envs, slots and the host), `sortkeys.py` (the env sort's keys), `render.py` (the observation pass),
`pyboy_loader.py` (what PyBoy's state loader recomputes).
"""

import ctypes.util
import hashlib
import json
import os
import re
import shutil
import struct
import sys
from pathlib import Path

import warp as wp

from gbxcule.core.paths import cache_dir

wp.config.kernel_cache_dir = str(cache_dir() / "warp")
wp.config.enable_backward = False
wp.config.log_level = wp.LOG_ERROR


def _nvidia_driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version") or ctypes.util.find_library("cuda") is not None


_healed = False


def init_warp() -> None:
    """Initialise Warp once and check its kernel cache (`heal_kernel_cache`). Without an NVIDIA driver,
    Warp's native "no CUDA driver" notice is silenced: on a CPU-only machine it is expected, and it would
    break one-line error messages."""
    global _healed
    if _nvidia_driver_present():
        wp.init()
    else:
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            wp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
    if not _healed:
        _healed = True
        heal_kernel_cache(Path(wp.config.kernel_cache_dir))


# The kernel cache: Warp keeps one folder per module (wp_<name>_<hash>) with a `.meta` (JSON) and compiled
# binaries (.o for the CPU, .cubin/.ptx for CUDA), keyed by a hash of the kernels' source and options (no
# paths: a cache copied to another checkout or machine with the same Warp and CUDA stays warm). Warp trusts
# whatever it finds there, so a truncated binary or a garbage .meta would fail every run. Each folder gets
# a record of its files' sizes and SHA-256 (HASHES); an entry that fails the check is deleted, with a note,
# and Warp rebuilds it.
HASHES = "gbxcule-hashes.json"
_BUILD_DIR = re.compile(r"_p\d+_t\d+$")  # Warp's in-progress build folders


def _elf_problem(data: bytes) -> str | None:
    """Why `data` is not a complete ELF file (header, section table and sections inside it), or None."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return "not an ELF file"
    if data[4] != 2:  # 32-bit ELF: only check the magic
        return None
    end = "<" if data[5] == 1 else ">"
    shoff, = struct.unpack_from(end + "Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    if shoff + shnum * shentsize > len(data):
        return "truncated"
    for i in range(shnum):
        sh_type, = struct.unpack_from(end + "I", data, shoff + i * shentsize + 4)
        off, size = struct.unpack_from(end + "QQ", data, shoff + i * shentsize + 0x18)
        if sh_type != 8 and off + size > len(data):  # 8: SHT_NOBITS takes no file space
            return "truncated"
    return None


def _file_problem(path: Path, data: bytes) -> str | None:
    if path.suffix == ".meta":
        try:
            return None if isinstance(json.loads(data), dict) else "bad .meta"
        except ValueError:
            return "bad .meta"
    if path.suffix in (".o", ".cubin"):
        return _elf_problem(data)
    return None


def check_cache_entry(folder: Path) -> str | None:
    """Why a module folder of the kernel cache is corrupt, or None; records hashes of files it vouches for."""
    record_path = folder / HASHES
    try:
        record = json.loads(record_path.read_text()) if record_path.exists() else {}
        if not isinstance(record, dict):
            record = {}
    except (OSError, ValueError):
        record = {}
    changed = False
    for path in sorted(folder.iterdir()):
        if path.name == HASHES or not path.is_file() or path.suffix not in (".meta", ".o", ".cubin", ".ptx"):
            continue
        st = path.stat()
        seen = record.get(path.name)
        if seen and seen[0] == st.st_size and seen[1] == st.st_mtime_ns:
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if seen and seen[2] != digest:
            return f"{path.name} changed since it was built"
        problem = _file_problem(path, data)
        if problem:
            return f"{path.name}: {problem}"
        record[path.name] = [st.st_size, st.st_mtime_ns, digest]
        changed = True
    if changed:
        try:
            tmp = record_path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(record))
            tmp.replace(record_path)
        except OSError:
            pass  # a read-only cache still loads; it is only not vouched for
    return None


def heal_kernel_cache(root: Path) -> list[str]:
    """Delete corrupt module folders under Warp's cache `root` (one note each on stderr); their names."""
    healed = []
    try:
        folders = [f for f in root.iterdir() if f.is_dir() and f.name.startswith("wp_")
                   and not _BUILD_DIR.search(f.name)]
    except OSError:
        return healed
    for folder in sorted(folders):
        try:
            problem = check_cache_entry(folder)
        except OSError as exc:
            problem = exc.strerror or str(exc)
        if problem:
            shutil.rmtree(folder, ignore_errors=True)
            sys.stderr.write(f"gbxcule: note: kernel cache entry {folder.name} was corrupt ({problem}); "
                             "deleted, it will be rebuilt\n")
            healed.append(folder.name)
    return healed
