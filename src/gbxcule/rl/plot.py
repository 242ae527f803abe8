"""Learning curves from run folders' metrics.jsonl (matplotlib, headless)."""

from __future__ import annotations

import json
from pathlib import Path

from gbxcule.core.errors import GbxculeError

CURVES = (("episode_return", "episode return"), ("success_rate", "success rate (sampled policy)"),
          ("entropy", "policy entropy"), ("sps", "env-steps/s (training)"))


def read_metrics(run: str | Path) -> list[dict]:
    p = Path(run)
    path = p / "metrics.jsonl" if p.is_dir() else p
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise GbxculeError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        rows = [json.loads(x) for x in lines if x.strip()]
    except json.JSONDecodeError:
        raise GbxculeError(f"{path} is not a metrics log (one JSON object a line)") from None
    if not rows:
        raise GbxculeError(f"{path} holds no updates yet")
    return rows


def plot_runs(runs, out: str | Path | None = None, x: str = "env_steps") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gbxcule.core.outputs import write_output

    data = {str(r): read_metrics(r) for r in runs}
    folder = Path(out) if out else (Path(runs[0]) if Path(runs[0]).is_dir() else Path(runs[0]).parent)
    written = []
    for key, title in CURVES:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        for name, rows in data.items():
            pts = [(r[x], r[key]) for r in rows if r.get(key) is not None and r.get(x) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=Path(name).name, lw=1.4)
        ax.set_title(title)
        ax.set_xlabel("env-steps" if x == "env_steps" else "wall time (s)")
        ax.grid(alpha=0.3)
        if len(data) > 1:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = folder / f"{key}.png"
        written.append(write_output(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png"), inputs=list(runs)))
        plt.close(fig)
    return written
