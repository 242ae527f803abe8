"""Condense an Nsight Compute SASS source page into where the step kernel's time goes: warp stall reasons
(share of the stall samples) and the executed-instruction mix by opcode.

    ncu --import step.ncu-rep --page source --csv --print-source sass > step_sass.csv   # bash scripts/gpu/gpu.sh ncu
    python scripts/profile/ncu_summary.py step_sass.csv [--top 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import sys


def summarize(path: str, top: int = 12) -> dict:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names, data = rows[header], [r for r in rows[header + 1:] if len(r) == len(rows[header])]
    col = {h: i for i, h in enumerate(names)}

    def num(r: list[str], key: str) -> float:
        try:
            return float(r[col[key]].replace(",", ""))
        except ValueError:
            return 0.0

    executed = [num(r, "Instructions Executed") for r in data]
    samples = [num(r, "Warp Stall Sampling (All Samples)") for r in data]
    total_exec, total_samples = sum(executed), sum(samples) or 1.0
    stalls = {h[len("stall_"):]: sum(num(r, h) for r in data) / total_samples
              for h in names if h.startswith("stall_") and "Not Issued" not in h}
    mix, mix_samples = collections.Counter(), collections.Counter()
    for r, e, s in zip(data, executed, samples, strict=True):
        text = re.sub(r"^@!?U?P\w+\s+", "", r[col["Source"]].strip())
        op = text.split()[0].split(".")[0] if text else "?"
        mix[op] += e
        mix_samples[op] += s
    return {
        "sass_instructions": len(data), "executed_warp_instructions": total_exec,
        "stall_samples": total_samples,
        "stalls": dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:top]),
        "opcodes": {op: {"executed": v / total_exec, "samples": mix_samples[op] / total_samples}
                    for op, v in mix.most_common(top)},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--json", help="also write the summary here")
    args = p.parse_args()
    try:
        s = summarize(args.csv, args.top)
    except (OSError, StopIteration, KeyError) as exc:
        print(f"error: {args.csv} is not an ncu SASS source page ({exc})", file=sys.stderr)
        return 2
    print(f"{s['sass_instructions']} SASS instructions, {s['executed_warp_instructions']:,.0f} warp instructions "
          f"executed, {s['stall_samples']:,.0f} stall samples")
    print("stall reason           share of samples")
    for k, v in s["stalls"].items():
        print(f"  {k:22s} {100 * v:5.1f}%")
    print("opcode     executed  stall samples")
    for k, v in s["opcodes"].items():
        print(f"  {k:8s} {100 * v['executed']:6.1f}%  {100 * v['samples']:6.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
