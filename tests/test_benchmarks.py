"""benchmarks/ holds results, not history: at most 8 folders named by what they measure and 2 MB in all, no run logs
or checkpoints; each figure BENCHMARKS.md, README.md or docs/ cite is one summary JSON there (scripts/bench/
summarize.py's keys), every cited path exists and every summary and picture is cited. Run artifacts stay in git
history (BENCHMARKS.md says where)."""

import itertools
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
INPUTS = ("games",)  # inputs of scripts and tests (the game set), not figures; so are benchmarks/tasks/*.toml
KEYS = ("figure", "command", "tree", "machine", "date", "numbers", "from")
# a path under benchmarks/, not one in git history (`git show SHA:benchmarks/...`)
CITED = re.compile(r"(?<![\w:/.-])benchmarks/[\w./{},*-]*[\w/}*]")


def docs() -> dict[str, str]:
    files = [ROOT / "BENCHMARKS.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in files}


def expand(path: str) -> list[str]:
    """`a/{b,c}/d` -> [`a/b/d`, `a/c/d`] (every brace group, as a shell expands them)."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def cited_paths() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, text in docs().items():
        for m in CITED.finditer(text):
            for p in expand(m.group(0).rstrip(".,")):
                out.setdefault(p, set()).add(name)
    return out


def summaries() -> list[Path]:
    return sorted(p for p in BENCH.rglob("*.json") if p.relative_to(BENCH).parts[0] not in INPUTS)


def test_benchmarks_is_small_and_holds_no_run_logs():
    folders = sorted(p.name for p in BENCH.iterdir() if p.is_dir())
    assert len(folders) <= 8, f"benchmarks/ has {len(folders)} folders (at most 8): {folders}"
    assert not [p for p in BENCH.iterdir() if p.is_file()], "benchmarks/ holds folders only"
    for name in folders:
        assert re.fullmatch(r"[a-z][a-z_]*", name), f"benchmarks/{name}: named by what it measures, not by date"
    files = [p for p in BENCH.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    assert size <= 2 * 2**20, f"benchmarks/ holds {size:,} bytes (at most 2 MiB)"
    logs = [p.relative_to(ROOT).as_posix() for p in BENCH.rglob("*")
            if p.name == "metrics.jsonl" or p.suffix in (".log", ".pt", ".npz") or p.name == "tb"
            or p.name.startswith(("checkpoint", "events.out.tfevents"))]
    assert not logs, f"run logs and checkpoints stay out of git: {logs}"


def test_every_cited_benchmarks_path_exists():
    cited = cited_paths()
    assert len(cited) > 20
    missing = {p: sorted(where) for p, where in cited.items() if "*" not in p and not (ROOT / p).exists()}
    assert not missing, f"cited but missing: {missing}"


def test_every_summary_and_picture_is_cited():
    cited = set(cited_paths())
    orphans = [p.relative_to(ROOT).as_posix() for p in [*summaries(), *BENCH.rglob("*.png")]
               if p.relative_to(ROOT).as_posix() not in cited]
    assert not orphans, f"not cited in BENCHMARKS.md, README.md or docs/: {orphans}"


def test_every_summary_has_the_keys():
    found = summaries()
    assert len(found) >= 20
    for p in found:
        data = json.loads(p.read_text())
        where = p.relative_to(ROOT).as_posix()
        assert all(k in data for k in KEYS), f"{where} lacks {[k for k in KEYS if k not in data]}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["date"]), f"{where}: date {data['date']!r}"
        shas = re.split(r"[ ,+]+", data["tree"])
        assert all(re.fullmatch(r"[0-9a-f]{7,40}", s) for s in shas), f"{where}: tree {data['tree']!r}"
        assert isinstance(data["numbers"], dict) and data["numbers"], where
        assert data["figure"] and data["command"] and data["machine"] and data["from"], where
