"""Developer tools: scripts/profile/ncu_lines.py on a small synthetic profile, scripts/profile/pc_profile.py on a
built-in ROM."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"Thread Instructions Executed","stall_no_inst"')
SASS = '''"Kernel Name","step_kernel_x_cuda_kernel_forward",
''' + HEADER + '''
"0x1000","  LDC R1, c[0x0][0x28]","10","100","3200","1"
"0x1010","  IADD R2, R2, 0x1","30","200","1600","5"
"0x1020","  BRA 0x1000","60","200","6400","0"
'''
LINES = '''\t//## File "/x/k.py", line 3
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/x/builtin.h", line 643
        /*0010*/                   IADD R2, R2, 0x1 ;
\t//## File "/x/k.py", line 7
        /*0020*/                   BRA 0x1000 ;
'''
SRC = "def first():\n    pass\n    x = 1\n\n\ndef second():\n    y = 2\n"


def test_ncu_lines_sums_by_function_and_line(tmp_path):
    (tmp_path / "s.csv").write_text(SASS)
    (tmp_path / "l.txt").write_text(LINES)
    (tmp_path / "k.py").write_text(SRC)
    for py, first_warp in ((False, 100), (True, 300)):  # --py: the header's IADD goes to k.py line 3
        out = tmp_path / f"o{py}.json"
        r = subprocess.run([sys.executable, str(ROOT / "scripts/profile/ncu_lines.py"), str(tmp_path / "s.csv"),
                            str(tmp_path / "l.txt"), "--src", str(tmp_path), "--json", str(out)]
                           + (["--py"] if py else []), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        data = json.loads(out.read_text())
        funcs = {f["key"]: f for f in data["functions"]}
        assert funcs["k.py:first"]["warp"] == first_warp and funcs["k.py:second"]["warp"] == 200
        assert funcs["k.py:second"]["thread"] / funcs["k.py:second"]["warp"] == 32  # active lanes
        assert ("builtin.h:?" in funcs) != py
    r = subprocess.run([sys.executable, str(ROOT / "scripts/profile/ncu_lines.py"), str(tmp_path / "k.py"),
                        str(tmp_path / "l.txt")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_pc_profile_samples_a_built_in_rom():
    """scripts/profile/pc_profile.py: every sample is a running or a halted env, and the hottest PCs are listed with
    their instructions; a missing ROM is one error line."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts/profile/pc_profile.py"), "--rom", "IDLE_LOOPS",
                        "--envs", "2", "--warmup", "2", "--steps", "1", "--stops", "2", "--top", "3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if not x.startswith(("Module", "Warp"))]
    assert lines[0].startswith("IDLE_LOOPS.gb: 96 samples,") and "instructions a frame" in lines[0]
    assert 1 <= len(lines[1:]) <= 3 and all("%" in x for x in lines[1:])
    r = subprocess.run([sys.executable, str(ROOT / "scripts/profile/pc_profile.py"), "--rom", "missing.gb"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("pc_profile:")
