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
    for name, rows in data.items():  # runs with several start slots: success by slot over training
        grid = slot_success_grid(rows)
        if grid is None:
            continue
        steps, rates = grid
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        mesh = ax.pcolormesh(steps, range(len(rates[0]) + 1), [list(c) for c in zip(*rates, strict=True)],
                             vmin=0, vmax=1, cmap="viridis", shading="flat")
        fig.colorbar(mesh, ax=ax, label="success rate")
        ax.set_title(f"success by start slot{'' if len(data) == 1 else ': ' + Path(name).name}")
        ax.set_xlabel("env-steps")
        ax.set_ylabel("start slot")
        fig.tight_layout()
        path = folder / ("success_by_start_slot.png" if len(data) == 1 else
                         f"success_by_start_slot_{Path(name).name}.png")
        written.append(write_output(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png"), inputs=list(runs)))
        plt.close(fig)
    return written


def slot_success_grid(rows: list[dict]):
    """(env-step edges, per update the success rate of each start slot, NaN where none ended) from the
    `slot_episodes` / `slot_successes` of a run's log, or None when it has no such lists."""
    rows = [r for r in rows if r.get("slot_episodes") and r.get("env_steps") is not None]
    if not rows:
        return None
    edges = [0] + [r["env_steps"] for r in rows]
    rates = [[s / e if e else float("nan") for e, s in zip(r["slot_episodes"], r["slot_successes"], strict=True)]
             for r in rows]
    return edges, rates
