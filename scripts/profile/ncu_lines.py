"""Where a profiled step kernel's work goes, by Python source: joins an Nsight Compute SASS source page
(executed warp instructions, thread instructions, stall samples per SASS address) with the line info of the
same cubin (`nvdisasm -g`), and sums by Warp function and by source line.

    ncu --import step.ncu-rep --page source --csv --print-source sass > step_sass.csv
    nvdisasm -g -c KERNEL.cubin > step_lines.txt        # the cubin from Warp's kernel cache, built with lineinfo
    python scripts/profile/ncu_lines.py step_sass.csv step_lines.txt [--src DIR ...] [--top 40] [--json out.json]

`lanes` is the average number of active threads of the executed warp instructions (32: no divergence).
`nvdisasm -g` gives only the innermost source location, so Warp's C++ headers (int32 operators in
builtin.h, indexing in array.h) get their own rows; `--py` attributes them to the Python line before them.
"""

from __future__ import annotations

import argparse
import ast
import collections
import csv
import json
import re
import sys
from pathlib import Path

_LOC = re.compile(r'//## File "([^"]+)", line (\d+)')
_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")


def parse_lines(text: str, py: bool = False) -> dict[int, tuple[str, int]]:
    """SASS offset -> (file, line) from `nvdisasm -g` output. `py`: code from Warp's C++ headers (builtin.h:
    int32 operators, array.h: indexing) goes to the last Python line before it in program order, the line
    that used the operator as far as `nvdisasm -g` (no inlining info) can tell."""
    out, loc, last_py = {}, ("?", 0), ("?", 0)
    for raw in text.splitlines():
        m = _LOC.search(raw)
        if m:
            loc = (m.group(1), int(m.group(2)))
            if loc[0].endswith(".py"):
                last_py = loc
            elif py:
                loc = last_py
            continue
        m = _INS.search(raw)
        if m:
            out[int(m.group(1), 16)] = loc
    return out


def read_sass(path: str) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names = rows[header]
    col = {h: i for i, h in enumerate(names)}

    def num(r, key):
        try:
            return float(r[col[key]].replace(",", ""))
        except (KeyError, ValueError):
            return 0.0

    data = [r for r in rows[header + 1:] if len(r) == len(names)]
    base = int(data[0][col["Address"]], 16)
    return [{"offset": int(r[col["Address"]], 16) - base, "sass": r[col["Source"]].strip(),
             "warp": num(r, "Instructions Executed"), "thread": num(r, "Thread Instructions Executed"),
             "samples": num(r, "Warp Stall Sampling (All Samples)"),
             "no_inst": num(r, "stall_no_inst")} for r in data]


def functions_of(path: Path) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every function defined in a Python file."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return []
    return [(n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sass_csv")
    p.add_argument("lines_txt")
    p.add_argument("--src", nargs="*", default=[],
                   help="folders holding the profiled version of the source files (searched first, by name)")
    p.add_argument("--py", action="store_true", help="attribute header code to the preceding Python line")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json")
    args = p.parse_args()
    from gbxcule.core.errors import GbxculeError
    from gbxcule.core.outputs import check_output, write_output

    try:
        if args.json:
            check_output(args.json, [args.sass_csv, args.lines_txt])
    except GbxculeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        sass = read_sass(args.sass_csv)
        lines = parse_lines(Path(args.lines_txt).read_text(), args.py)
    except (OSError, StopIteration, KeyError, IndexError) as exc:
        print(f"error: cannot read the inputs ({exc})", file=sys.stderr)
        return 2
    funcs: dict[str, list] = {}

    def func_of(file: str, line: int) -> str:
        name = Path(file).name
        if name not in funcs:
            cands = [Path(d) / name for d in args.src] + [Path(file)]  # --src first: the profiled version
            funcs[name] = next((functions_of(c) for c in cands if c.is_file()), [])
        inner = [f for f in funcs[name] if f[0] <= line <= f[1]]
        return f"{name}:{min(inner, key=lambda f: f[1] - f[0])[2] if inner else '?'}"

    by_line, by_func = collections.defaultdict(lambda: [0.0] * 5), collections.defaultdict(lambda: [0.0] * 5)
    matched = 0
    for r in sass:
        loc = lines.get(r["offset"])
        if loc is None:
            continue
        matched += 1
        key = f"{Path(loc[0]).name}:{loc[1]}"
        fn = func_of(*loc)
        for acc in (by_line[key], by_func[fn]):
            acc[0] += r["warp"]
            acc[1] += r["thread"]
            acc[2] += r["samples"]
            acc[3] += 1
            acc[4] += r["no_inst"]
    total_w = sum(r["warp"] for r in sass) or 1.0
    total_s = sum(r["samples"] for r in sass) or 1.0
    print(f"{len(sass)} SASS rows, {matched} with line info; {total_w:,.0f} warp instructions, "
          f"average lanes {sum(r['thread'] for r in sass) / total_w:.1f}")

    def table(title, acc):
        print(f"\n{title:44s} {'warp %':>7s} {'lanes':>6s} {'samples %':>9s} {'no_inst %':>9s} {'SASS':>6s}")
        rows = sorted(acc.items(), key=lambda kv: -kv[1][2])[:args.top]
        for k, (w, t, s, n, ni) in rows:
            print(f"{k[:44]:44s} {100 * w / total_w:7.2f} {t / w if w else 0:6.1f} {100 * s / total_s:9.2f} "
                  f"{100 * ni / total_s:9.2f} {n:6.0f}")
        return [{"key": k, "warp": w, "thread": t, "samples": s, "sass": n, "no_inst": ni}
                for k, (w, t, s, n, ni) in rows]

    out = {"functions": table("function (by stall samples)", by_func), "lines": table("line", by_line)}
    if args.json:
        write_output(args.json, json.dumps(out, indent=1), [args.sass_csv, args.lines_txt])
    return 0


if __name__ == "__main__":
    sys.exit(main())
