"""gbxcule's native snapshot format: the complete state of one or more envs, to resume them bit for bit.

A file is a preamble, then a body that the preamble's SHA-256 covers:

=========  ======  =============================================================================
offset     size    contents
=========  ======  =============================================================================
0          8       magic ``GBXSNAP\\0``
8          4       format version (u32 little-endian), `FORMAT_VERSION`
12         8       body length in bytes (u64)
20         32      SHA-256 of the body
52         4       header length H (u32), first field of the body
56         H       header: UTF-8 JSON (see `Snapshot`), including the schema hash and the ROM's SHA-1
56+H       ...     payload: every env's fields (int32 LE, [envs, fields]), then RAM (uint8, [envs, bytes]),
                   then SB capture ring (uint8, [envs, SERIAL_CAPTURE])
=========  ======  =============================================================================

The schema hash digests the state layout (`core/schema.py`: field names in order, cycle fields, RAM
regions and sizes, SB ring size): a file written by a build with another layout is refused, never
reinterpreted. `decode_snapshot` checks everything (magic, version, length, checksum, header, sizes, ROM)
before returning, so a bad file never half-loads; `write_snapshot` writes a temporary file next to the
target and renames it over the target, so a crash never leaves a partial file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gbxcule.core.errors import GbxculeError
from gbxcule.core.schema import CYCLE_FIELDS, FIELD_INDEX, FIELDS, FIXED_REGIONS, NUM_FIELDS, SERIAL_CAPTURE

MAGIC = b"GBXSNAP\0"
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sIQ32s")


class SnapshotError(GbxculeError):
    """A native snapshot that is truncated, corrupt, of another version or schema, or for another ROM."""


def state_schema(ram_bytes: int) -> dict:
    """The layout a snapshot's payload follows, for a cartridge with `ram_bytes` of per-env RAM in total."""
    return {"fields": [name for name, _ in FIELDS], "cycle_fields": list(CYCLE_FIELDS),
            "regions": [list(r) for r in FIXED_REGIONS], "ram_bytes": ram_bytes, "serial_capture": SERIAL_CAPTURE}


def schema_hash(schema: dict) -> str:
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()


@dataclass
class EnvState:
    """One env's complete state on the host: fields (int32 [NUM_FIELDS], `core/schema.py` order), RAM
    (uint8, the regions of `ram_layout` in order) and the SB capture ring (uint8 [SERIAL_CAPTURE])."""

    fields: np.ndarray
    ram: np.ndarray
    serial: np.ndarray = field(default_factory=lambda: np.zeros(SERIAL_CAPTURE, dtype=np.uint8))

    def field(self, name: str) -> int:
        return int(self.fields[FIELD_INDEX[name]])


@dataclass
class Snapshot:
    """What a snapshot file holds: env states for one ROM, and how they were being stepped."""

    rom_sha1: str
    rom_title: str
    envs: list[EnvState]
    frames_per_step: int
    release_after_frames: int
    codec: str


def encode_snapshot(snap: Snapshot) -> bytes:
    if not snap.envs:
        raise SnapshotError("a snapshot needs at least one env state")
    ram_bytes = len(snap.envs[0].ram)
    for i, env in enumerate(snap.envs):
        shapes = (np.shape(env.fields), np.shape(env.ram), np.shape(env.serial))
        if shapes != ((NUM_FIELDS,), (ram_bytes,), (SERIAL_CAPTURE,)):
            raise SnapshotError(f"env state {i} has shapes {shapes}, expected "
                                f"{((NUM_FIELDS,), (ram_bytes,), (SERIAL_CAPTURE,))}")
    schema = state_schema(ram_bytes)
    header = {"format": "gbxcule-snapshot", "schema_hash": schema_hash(schema), "schema": schema,
              "rom_sha1": snap.rom_sha1, "rom_title": snap.rom_title, "num_envs": len(snap.envs),
              "frames_per_step": snap.frames_per_step, "release_after_frames": snap.release_after_frames,
              "codec": snap.codec}
    head = json.dumps(header, sort_keys=True).encode()
    payload = b"".join([
        np.stack([np.asarray(e.fields, dtype="<i4") for e in snap.envs]).tobytes(),
        np.stack([np.asarray(e.ram, dtype=np.uint8) for e in snap.envs]).tobytes(),
        np.stack([np.asarray(e.serial, dtype=np.uint8) for e in snap.envs]).tobytes(),
    ])
    body = struct.pack("<I", len(head)) + head + payload
    return _PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(body), hashlib.sha256(body).digest()) + body


def is_snapshot(data: bytes) -> bool:
    return bytes(data[:len(MAGIC)]) == MAGIC


def decode_snapshot(data: bytes, rom_sha1: str | None = None, ram_bytes: int | None = None) -> Snapshot:
    """Parse and check a snapshot; with `rom_sha1`/`ram_bytes`, also that it fits that ROM. Raises only
    `SnapshotError`."""
    data = bytes(data)
    if not is_snapshot(data):
        raise SnapshotError("not a gbxcule snapshot (bad magic)")
    if len(data) < _PREAMBLE.size + 4:
        raise SnapshotError(f"truncated gbxcule snapshot: {len(data)} bytes, shorter than its preamble")
    _, version, body_len, digest = _PREAMBLE.unpack_from(data)
    if version != FORMAT_VERSION:
        raise SnapshotError(f"unsupported gbxcule snapshot format version {version} (this build reads "
                            f"{FORMAT_VERSION})")
    body = data[_PREAMBLE.size:]
    if len(body) < body_len:
        raise SnapshotError(f"truncated gbxcule snapshot: {len(data)} bytes, its preamble says "
                            f"{_PREAMBLE.size + body_len}")
    if len(body) > body_len:
        raise SnapshotError(f"corrupt gbxcule snapshot: {len(body) - body_len} bytes after its end")
    if hashlib.sha256(body).digest() != digest:
        raise SnapshotError("corrupt gbxcule snapshot: its SHA-256 checksum does not match")
    (head_len,) = struct.unpack_from("<I", body)
    try:
        header = json.loads(body[4:4 + head_len].decode())
        schema, count = header["schema"], int(header["num_envs"])
        rb = int(schema["ram_bytes"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"corrupt gbxcule snapshot header ({type(exc).__name__})") from None
    ours = state_schema(rb)
    if schema != ours or header.get("schema_hash") != schema_hash(ours):
        theirs = schema.get("fields", []) if isinstance(schema, dict) else []
        diff = sorted(set(ours["fields"]) ^ set(map(str, theirs))) or ["field order, regions or sizes"]
        raise SnapshotError(f"gbxcule snapshot has another state schema than this build (differs in: "
                            f"{', '.join(map(str, diff[:6]))}); re-create it with this build")
    if rom_sha1 is not None and header.get("rom_sha1") != rom_sha1:
        raise SnapshotError(f"gbxcule snapshot is for another ROM ({header.get('rom_title')!r}, sha1 "
                            f"{str(header.get('rom_sha1'))[:12]}); the loaded ROM has sha1 {rom_sha1[:12]}")
    if ram_bytes is not None and rb != ram_bytes:
        raise SnapshotError(f"gbxcule snapshot holds {rb} RAM bytes per env; this cartridge has {ram_bytes}")
    sizes = (count * NUM_FIELDS * 4, count * rb, count * SERIAL_CAPTURE)
    payload = body[4 + head_len:]
    if count < 1 or len(payload) != sum(sizes):
        raise SnapshotError(f"corrupt gbxcule snapshot: {len(payload)} payload bytes for {count} envs, "
                            f"expected {sum(sizes)}")
    fields = np.frombuffer(payload, "<i4", count * NUM_FIELDS).astype(np.int32).reshape(count, NUM_FIELDS)
    ram = np.frombuffer(payload, np.uint8, sizes[1], sizes[0]).reshape(count, rb)
    serial = np.frombuffer(payload, np.uint8, sizes[2], sizes[0] + sizes[1]).reshape(count, SERIAL_CAPTURE)
    envs = [EnvState(fields[i].copy(), ram[i].copy(), serial[i].copy()) for i in range(count)]
    try:
        return Snapshot(str(header["rom_sha1"]), str(header["rom_title"]), envs, int(header["frames_per_step"]),
                        int(header["release_after_frames"]), str(header["codec"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"corrupt gbxcule snapshot header ({type(exc).__name__})") from None


def write_snapshot(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically: a temporary file in the same folder, flushed, then renamed."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise GbxculeError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p
