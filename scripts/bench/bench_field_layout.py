"""How long a launch takes to load and store every env's fields, by layout and by how the envs are spread over
warps (the backend's sort hands a warp scattered envs). Field-major is `fields[f * n + e]`, env-major (what the
step kernel uses, core/schema.py) `fields[e * NUM_FIELDS + f]`; each thread loads its env's fields, sums them and
stores them back, as the step kernel's prologue and epilogue do. Prints a table, writes JSON (`--out`).
Needs a CUDA device.   Usage: python scripts/bench/bench_field_layout.py [--envs 262144 65536] [--out FILE]"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def kernel(layout: str, num_fields: int):
    """A generated kernel (one line per field, as kernels/gen.py writes the step kernel's loads and stores)."""
    if layout == "env-major vec4":
        words = (num_fields + 3) // 4
        ref = [f"f4[e * {words} + {j}]" for j in range(words)]
        lines = [f"    w{j} = {r}" for j, r in enumerate(ref)]
        lines.append("    s = " + " + ".join(f"w{j}[0] + w{j}[1] + w{j}[2] + w{j}[3]" for j in range(words)))
        lines += [f"    {r} = wp.vec4i(w{j}[0] + s, w{j}[1] + s, w{j}[2] + s, w{j}[3] + s)" for j, r in enumerate(ref)]
        arg = "f4: wp.array(dtype=wp.vec4i)"
    else:
        ref = [f"f[e * {num_fields} + {i}]" if layout == "env-major" else f"f[{i} * n + e]" for i in range(num_fields)]
        lines = [f"    v{i} = {r}" for i, r in enumerate(ref)]
        lines.append("    s = " + " + ".join(f"v{i}" for i in range(num_fields)))
        lines += [f"    {r} = v{i} + s" for i, r in enumerate(ref)]
        arg = "f: wp.array(dtype=wp.int32)"
    src = ("import warp as wp\n\n\n@wp.kernel(enable_backward=False)\n"
           f"def k({arg}, perm: wp.array(dtype=wp.int32), n: wp.int32):\n    t = wp.tid()\n    e = perm[t]\n"
           + "\n".join(lines) + "\n")
    path = Path(tempfile.mkdtemp()) / f"field_layout_{layout.replace(' ', '_').replace('-', '_')}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[262144, 65536])
    ap.add_argument("--launches", type=int, default=20, help="timed launches per case (default 20)")
    ap.add_argument("--out", default="field_layout.json")
    args = ap.parse_args()
    import warp as wp

    from gbxcule.core.schema import NUM_FIELDS

    wp.config.quiet = True
    wp.init()
    if not wp.is_cuda_available():
        print("error: bench_field_layout needs a CUDA device", file=sys.stderr)
        return 2
    layouts = ("field-major", "env-major", "env-major vec4")
    kernels = {name: kernel(name, NUM_FIELDS) for name in layouts}
    rows = []
    for n in args.envs:
        rng = np.random.default_rng(0)
        perms = {"identity": np.arange(n), "random": rng.permutation(n),  # stable sorts by few or many keys:
                 "64 keys": np.argsort(rng.integers(0, 64, n), kind="stable"),
                 "1024 keys": np.argsort(rng.integers(0, 1024, n), kind="stable")}
        words = (NUM_FIELDS + 3) // 4
        arrays = {"field-major": wp.zeros(NUM_FIELDS * n, dtype=wp.int32, device="cuda"),
                  "env-major": wp.zeros(NUM_FIELDS * n, dtype=wp.int32, device="cuda"),
                  "env-major vec4": wp.zeros(words * n, dtype=wp.vec4i, device="cuda")}
        for layout in layouts:
            for spread, p in perms.items():
                perm = wp.array(p.astype(np.int32), dtype=wp.int32, device="cuda")
                inputs = [arrays[layout], perm, n]
                for _ in range(3):
                    wp.launch(kernels[layout], dim=n, inputs=inputs, device="cuda", block_dim=256)
                wp.synchronize()
                start = time.perf_counter()
                for _ in range(args.launches):
                    wp.launch(kernels[layout], dim=n, inputs=inputs, device="cuda", block_dim=256)
                wp.synchronize()
                ms = (time.perf_counter() - start) / args.launches * 1000
                rows.append({"envs": n, "layout": layout, "spread": spread, "ms_per_launch": ms})
    Path(args.out).write_text(json.dumps({"device": wp.get_device("cuda").name, "num_fields": NUM_FIELDS,
                                          "rows": rows}, indent=1) + "\n")
    print(f"{'envs':>8s} {'layout':16s} {'envs over warps':16s} {'ms a launch':>12s}")
    for r in rows:
        print(f"{r['envs']:>8d} {r['layout']:16s} {r['spread']:16s} {r['ms_per_launch']:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
