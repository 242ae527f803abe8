"""Read the compiled CUDA step kernel without a GPU: registers, stack and spills (ptxas -v), SASS size and
the spill loads in its largest loops (nvdisasm); docs/kernel_style.md says what to look for.

    .venv/bin/python scripts/profile/kernel_report.py [--stage full_step] [--lean] [--max-registers N] [--arch 90]
                                              [--loop nested|flat]
                                              [--ptxas ptxas] [--nvdisasm nvdisasm] [--lines FILE --block-dim N]

Warp writes the kernel's PTX (NVRTC, no GPU needed); ptxas comes with a CUDA toolkit, nvdisasm with one or in
Triton's wheel (triton/backends/nvidia/bin). A PTX newer than the ptxas is relabelled to the version the
ptxas names in its error message.

`--lines FILE --block-dim N` instead writes `nvdisasm -g` of the cubin Warp's own NVRTC builds, with line info,
for N-thread blocks (`step_block_dim`: 128 at 65,536 envs on an H100): the same SASS, instruction for
instruction, as the GPU machine builds, so `scripts/profile/ncu_lines.py` can read a profile's source page against it
when the profile run's cubin is not at hand (at 255 registers the SASS is the same at 128 and 256 threads a
block). `bash scripts/gpu/gpu.sh kernel_report` runs the report for every step-kernel variant on the GPU machine.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def sass_loops(sass: str) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(instructions, spill loads, spill stores, [(size, spill loads)] of the 5 largest loops)."""
    ins, labels, pending = [], {}, []
    for line in sass.splitlines():
        lab = re.match(r"^(\.L_x_\d+):", line.strip())
        if lab:
            pending.append(lab.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            addr = int(m.group(1), 16)
            ins.append((addr, m.group(2)))
            labels.update((p, addr) for p in pending)
            pending = []
    loops = []
    for addr, text in ins:
        b = re.search(r"BRA\s+`\((\.L_x_\d+)\)", text)
        if b and labels.get(b.group(1), addr) < addr:
            body = [t for a, t in ins if labels[b.group(1)] <= a <= addr]
            loops.append((len(body), sum("LDL" in t for t in body)))
    loops.sort(reverse=True)
    return len(ins), sum("LDL" in t for _, t in ins), sum("STL" in t for _, t in ins), loops[:5]


def write_lines(wp, module, work: Path, args) -> int:
    """The cubin NVRTC builds for `args.block_dim`-thread blocks, disassembled with line info into args.lines."""
    wp.set_module_options({"block_dim": args.block_dim}, module)
    [cubin] = wp.compile_aot_module(module, arch=args.arch, module_dir=work, use_ptx=False)
    try:
        d = subprocess.run([args.nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True)
    except OSError as exc:
        print(f"error: cannot run nvdisasm ({exc}); pass --nvdisasm", file=sys.stderr)
        return 2
    if d.returncode != 0:
        print(f"error: nvdisasm failed: {d.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    Path(args.lines).write_text(d.stdout)
    n = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", d.stdout, re.M))
    print(f"{args.lines}: {n} SASS instructions, {args.block_dim}-thread blocks, sm_{args.arch}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stage", default="full_step")
    p.add_argument("--lean", action="store_true", help="the kernel without the renderer (docs/step_abi.md)")
    p.add_argument("--loop", default="nested", choices=("nested", "flat"), help="instruction loop (kernels/frame.py)")
    p.add_argument("--max-registers", type=int, default=None, help="the register cap of WarpVecBackend")
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--ptxas", default="ptxas")
    p.add_argument("--nvdisasm", default="nvdisasm")
    p.add_argument("--lines", default=None, metavar="FILE", help="write nvdisasm -g of the NVRTC cubin here")
    p.add_argument("--block-dim", type=int, default=256, help="threads a block (--lines; default 256)")
    args = p.parse_args()
    import warp as wp

    wp.config.lineinfo = args.lines is not None  # (a module takes it when it is created)
    from gbxcule.kernels import init_warp
    from gbxcule.kernels.step import load_kernels

    init_warp()
    work = Path(tempfile.mkdtemp(prefix="gbxcule_kernel_"))
    module = load_kernels(args.max_registers, args.stage, draws=not args.lean, flat=args.loop == "flat").module
    if args.lines:
        return write_lines(wp, module, work, args)
    [ptx_path] = wp.compile_aot_module(module, arch=args.arch, module_dir=work, use_ptx=True)
    ptx = Path(ptx_path).read_bytes().replace(b"\0", b"")
    cubin = work / "step.cubin"
    for _ in range(2):
        (work / "step.ptx").write_bytes(ptx)
        try:
            r = subprocess.run([args.ptxas, f"-arch=sm_{args.arch}", "-v", str(work / "step.ptx"), "-o",
                                str(cubin)], capture_output=True, text=True)
        except OSError as exc:
            print(f"error: cannot run ptxas ({exc}); install a CUDA toolkit or pass --ptxas", file=sys.stderr)
            return 2
        newest = re.search(r"current version is '(\d+\.\d+)'", r.stderr)
        if r.returncode == 0 or not newest:
            break
        ptx = re.sub(rb"^\.version \S+", b".version " + newest.group(1).encode(), ptx, count=1, flags=re.M)
    if r.returncode != 0:
        print(f"error: ptxas failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    print(f"stage {args.stage}{' (lean)' if args.lean else ''}, {args.loop} loop, sm_{args.arch}")
    for line in r.stderr.splitlines():
        if "registers" in line or "spill" in line:
            print("ptxas:", line.split("info    :")[-1].strip())
    try:
        d = subprocess.run([args.nvdisasm, "-c", str(cubin)], capture_output=True, text=True)
    except OSError:
        d = None
    if d is None or d.returncode != 0:
        print("nvdisasm not available: SASS counts skipped", file=sys.stderr)
        return 0
    n, ldl, stl, loops = sass_loops(d.stdout)
    print(f"SASS: {n} instructions, {ldl} spill loads (LDL), {stl} spill stores (STL)")
    for size, loads in loops:
        print(f"  loop of {size} instructions, {loads} spill loads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
