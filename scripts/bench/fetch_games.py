#!/usr/bin/env python3
"""Fetch the benchmark game ROMs listed in benchmarks/games/games.toml.

Each ROM is downloaded from its pinned `url` (or copied from --from DIR, by `<slug>.gb` or by
SHA-1), checked against `sha1` and `size`, and written atomically to --out (default .games/).

    python scripts/bench/fetch_games.py [--out DIR] [--from DIR] [--only slug1,slug2]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "benchmarks" / "games" / "games.toml"
MAX_ROM = 8 << 20  # no Game Boy ROM is larger than 8 MiB


class FetchError(Exception):
    pass


def sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def index_dir(src: Path) -> dict[str, Path]:
    """SHA-1 -> path of every plain file in src (for copies under other names)."""
    found = {}
    for p in sorted(src.iterdir()):
        if p.is_file() and p.stat().st_size <= MAX_ROM:
            found.setdefault(sha1(p.read_bytes()), p)
    return found


def download(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read(MAX_ROM + 1)
    except urllib.error.HTTPError as e:
        raise FetchError(f"download failed: HTTP {e.code} from {url}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise FetchError(f"download failed: {getattr(e, 'reason', e)} ({url})") from None
    if len(data) > MAX_ROM:
        raise FetchError(f"download failed: more than {MAX_ROM} bytes from {url}")
    return data


def obtain(game: dict, src: Path | None, by_sha: dict[str, Path], timeout: float) -> bytes:
    if src is None:
        return download(game["url"], timeout)
    named = src / f"{game['slug']}.gb"
    path = by_sha.get(game["sha1"]) or (named if named.is_file() else None)
    if path is None:
        raise FetchError(f"not in {src} (no {named.name}, no file with SHA-1 {game['sha1'][:12]})")
    try:
        return path.read_bytes()
    except OSError as e:
        raise FetchError(f"cannot read {path}: {e.strerror}") from None


def check(game: dict, data: bytes) -> None:
    if len(data) != game["size"]:
        raise FetchError(f"size mismatch: got {len(data)} bytes, expected {game['size']}")
    if sha1(data) != game["sha1"]:
        raise FetchError(f"SHA-1 mismatch: got {sha1(data)}, expected {game['sha1']}")


def write_atomic(dest: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise FetchError(f"cannot write {dest}: {e.strerror}") from None


def fetch_one(game: dict, out: Path, src: Path | None, by_sha: dict[str, Path], timeout: float) -> str:
    dest = out / f"{game['slug']}.gb"
    try:
        if dest.is_file() and sha1(dest.read_bytes()) == game["sha1"]:
            return "present"
    except OSError:
        pass
    data = obtain(game, src, by_sha, timeout)
    check(game, data)
    write_atomic(dest, data)
    return "copied" if src else "downloaded"


def read_games(manifest: str | Path, only: str = "") -> list[dict]:
    """The games of a manifest, in its order; with `only` (comma-separated slugs) just those. ValueError with
    the reason for a manifest that cannot be read, an entry without a slug, or a slug it does not list."""
    try:
        games = tomllib.loads(Path(manifest).read_text())["game"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise ValueError(f"bad manifest {manifest}: {exc}") from exc
    if not isinstance(games, list) or not all(isinstance(g, dict) and isinstance(g.get("slug"), str) for g in games):
        raise ValueError(f"bad manifest {manifest}: every [[game]] needs a slug")
    wanted = [s.strip() for s in only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - {g["slug"] for g in games})
    if unknown:
        raise ValueError(f"unknown slug(s): {', '.join(unknown)}")
    return [g for g in games if not wanted or g["slug"] in wanted]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help="games manifest (TOML)")
    ap.add_argument("--out", type=Path, default=ROOT / ".games", help="folder for the ROMs (default .games/)")
    ap.add_argument("--from", dest="src", type=Path, help="copy from this folder instead of downloading")
    ap.add_argument("--only", help="comma-separated slugs to fetch")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per download (default 60)")
    args = ap.parse_args(argv)

    from gbxcule.core.errors import GbxculeError
    from gbxcule.core.outputs import check_output_dir

    try:
        check_output_dir(args.out, [args.manifest, args.src])
        games = read_games(args.manifest, args.only or "")
        by_sha = index_dir(args.src) if args.src else {}
        args.out.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError, GbxculeError) as e:
        print(f"fetch_games: {e}", file=sys.stderr)
        return 2

    rows, failed = [], 0
    for game in games:
        try:
            status = fetch_one(game, args.out, args.src, by_sha, args.timeout)
        except FetchError as e:
            print(f"fetch_games: {game['slug']}: {e}", file=sys.stderr)
            status, failed = "FAILED", failed + 1
        rows.append((game["slug"], status, game["sha1"][:12]))

    width = max([len(r[0]) for r in rows] + [4])
    print(f"{'slug':<{width}}  {'status':<10}  sha1")
    for slug, status, prefix in rows:
        print(f"{slug:<{width}}  {status:<10}  {prefix}")
    print(f"{len(rows) - failed} of {len(rows)} ROMs in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
