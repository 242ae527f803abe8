"""Free memory now, and the check that a request fits before anything is allocated."""

from __future__ import annotations

import os

from gbxcule.core.errors import GbxculeError


def host_available() -> int | None:
    """Bytes of host memory available now (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _gb(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def fit(envs: int, per_env: int, available: int | None, where: str, fixed: int = 0) -> None:
    """Refuse `envs` envs of `per_env` bytes (plus `fixed`) if they do not fit in `available` bytes."""
    if available is None:
        return
    need = fixed + envs * per_env
    if need > available:
        most = max(0, (available - fixed) // per_env)
        raise GbxculeError(f"{envs} envs need {_gb(need)} of {where} memory but {_gb(available)} is available; "
                           f"at most {most} envs fit")
