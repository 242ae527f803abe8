"""Learning curves from run folders' metrics.jsonl (matplotlib, headless), runs overlaid: one PNG per panel
that the logs have data for, percentiles drawn as a p10-p90 band around the p50 line; and for a run with a state
archive the exploration pictures of its `archive.npz` (rl/explore.py): the screens as TensorBoard shows them, the
heat maps of RAM cells as figures with axes (the cell's x and y, in the units of its RAM bytes: map tiles for a
game that keeps tile coordinates) and a colour bar (`heat_map`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from gbxcule.core.errors import GbxculeError

# (file name, title, keys drawn as lines, percentile band prefix or None)
PANELS = (
    ("episode_return", "episode return (mean; band: p10-p90 of each env's last episode)", ("episode_return",),
     "return"),
    ("success_rate", "success rate", ("success_rate", "running_success", "eval/greedy_success"), None),
    ("entropy", "policy entropy", ("entropy",), None),
    ("sps", "env-steps/s (training)", ("sps",), None),
    ("episode_length", "episode length (mean; band: p10-p90)", ("episode_length",), "length"),
    ("goal_distance", "distance to the goal template (p50; band: p10-p90 over envs)", (), "dist"),
    ("rates", "episode ends per env-step", ("done_rate", "trunc_rate", "term_rate"), None),
    ("values", "value and advantage statistics", ("value_mean", "adv_mean", "adv_std", "explained_variance",
                                                   "q_mean"), None),
    ("losses", "losses", ("pg_loss", "v_loss", "q_loss", "loss"), None),
    ("policy_change", "how far each update moved the policy from the one that acted (KL; PPO's clipped share)",
     ("approx_kl", "clipfrac"), None),
    ("updates_per_s", "updates per second", ("updates_per_s",), None),
    ("exploration", "distinct cells reached (the state archive)", ("archive/cells",), None),
    ("archive_starts", "the task's start: its share p, the share of ended episodes from it, their success",
     ("archive/p_start", "archive/start_share", "success_from_start"), None),
)


def read_metrics(run: str | Path) -> list[dict]:
    p = Path(run)
    path = p / "metrics.jsonl" if p.is_dir() else p
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise GbxculeError(f"cannot read {path}: {exc.strerror or exc}") from None
    rows = []
    for i, x in enumerate(lines):
        if not x.strip():
            continue
        try:
            rows.append(json.loads(x))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a torn last line (a run killed mid-write): the rest is good
                continue
            raise GbxculeError(f"{path} is not a metrics log (line {i + 1} is not JSON)") from None
    if not rows:
        raise GbxculeError(f"{path} holds no updates yet")
    return rows


def first_reached(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(x, deepest milestone of that update) as (x, deepest so far): a staircase that climbs where each milestone
    was first reached."""
    out, best = [], 0.0
    for px, depth in points:
        best = max(best, depth)
        out.append((px, best))
    return out


def _points(rows: list[dict], x: str, key: str) -> list[tuple[float, float]]:
    return [(r[x], r[key]) for r in rows if isinstance(r.get(key), int | float) and r.get(x) is not None]


def milestone_order(runs_rows, x: str) -> list[str]:
    """The milestones the runs' rows log (`milestone/NAME`) in the order any run first reached one (its share > 0, by
    `x`); those never reached last, in the order logged."""
    runs_rows = list(runs_rows)
    names = dict.fromkeys(k.split("/", 1)[1] for rows in runs_rows for r in rows for k in r
                          if k.startswith("milestone/"))
    first = {n: min((p[0] for rows in runs_rows for p in _points(rows, x, f"milestone/{n}") if p[1] > 0),
                    default=float("inf")) for n in names}
    return sorted(names, key=first.__getitem__)


def plot_runs(runs, out: str | Path | None = None, x: str = "env_steps") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from PIL import Image

    from gbxcule.core.outputs import write_output
    from gbxcule.rl import explore
    from gbxcule.rl.rundir import ARCHIVE_NAME

    data = {str(r): read_metrics(r) for r in runs}
    folder = Path(out) if out else (Path(runs[0]) if Path(runs[0]).is_dir() else Path(runs[0]).parent)
    xlabel = "env-steps" if x == "env_steps" else "wall time (s)"
    written = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        written.append(write_output(folder / f"{name}.png", lambda tmp: fig.savefig(tmp, format="png"),
                                    inputs=list(runs)))
        plt.close(fig)

    for name, title, keys, band in PANELS:
        fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
        drawn = 0
        for run, rows in data.items():
            label = Path(run).name
            for key in keys:
                pts = _points(rows, x, key)
                if pts:
                    ax.plot(*zip(*pts, strict=True), lw=1.4,
                            label=label if len(keys) == 1 else f"{label}: {key}")
                    drawn += 1
            if band:
                lo, mid, hi = (_points(rows, x, f"{band}_p{p}") for p in (10, 50, 90))
                if mid:
                    line = ax.plot(*zip(*mid, strict=True), lw=1.0, ls="--", label=f"{label}: p50")[0]
                    drawn += 1
                    if lo and hi and len(lo) == len(hi):
                        ax.fill_between([p[0] for p in lo], [p[1] for p in lo], [p[1] for p in hi], alpha=0.2,
                                        color=line.get_color())
        if not drawn:
            plt.close(fig)
            continue
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if len(data) > 1 or len(keys) > 1 or band:
            ax.legend(fontsize=7)
        save(fig, name)
    # the periodic greedy eval against wall time from the process start: "time to 90%" read off the log
    evals = {run: _points(rows, "eval/elapsed_s", "eval/greedy_success") for run, rows in data.items()}
    if any(evals.values()):
        fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
        for run, pts in evals.items():
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, lw=1.4, label=Path(run).name)
        ax.axhline(0.9, color="grey", lw=0.8, ls=":")
        ax.set_title("greedy success (periodic eval) against wall time, start-up included", fontsize=9)
        ax.set_xlabel("seconds since the process started")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, "greedy_success_vs_time")
    # how far runs get: the deepest milestone any ended episode held per update, the milestones the median env playing
    # from the task's start holds (with an archive), and each milestone's share of the ended episodes (and of the
    # periodic greedy eval's episodes, from the task's start)
    far = {run: rows for run, rows in data.items() if any(r.get("milestone_rates") for r in rows)}
    if far:
        fig, (top, low) = plt.subplots(2, 1, figsize=(8.4, 6.0), dpi=110, sharex=True)
        # above, one colour a run; below, one colour a milestone (in the order runs first reached them) and one line
        # style a run, each named once in the legend
        every = milestone_order(far.values(), x)
        colour = {name: plt.get_cmap("tab20" if len(every) > 10 else "tab10")(i) for i, name in enumerate(every)}
        style = {run: ("-", "--", ":", "-.")[i % 4] for i, run in enumerate(far)}
        for i, (run, rows) in enumerate(far.items()):
            label, tint = Path(run).name, plt.get_cmap("tab10")(i % 10)
            deep = _points(rows, x, "milestone_deepest")
            if deep:  # the deepest so far: each milestone's first-reach time is where the staircase climbs to it
                top.step(*zip(*first_reached(deep), strict=True), where="post", lw=1.4, color=tint,
                         label=f"{label}: training")
            held = _points(rows, x, "archive/reach_level")
            if held:  # where the envs playing from the task's start are: the milestones the median one holds
                top.step(*zip(*held, strict=True), where="post", lw=1.0, ls="--", color=tint,
                         label=f"{label}: from the start (median env)")
            greedy = _points(rows, x, "eval/mean_deepest")
            if greedy:
                top.plot(*zip(*greedy, strict=True), marker="o", ms=3, lw=1.0, ls=":", color=tint,
                         label=f"{label}: greedy eval (mean)")
            for name in every:
                pts = _points(rows, x, f"milestone/{name}")
                if pts:
                    low.plot(*zip(*pts, strict=True), lw=1.0, color=colour[name], ls=style[run])
        top.set_title("how far runs get: the deepest milestone reached so far (first-reach times)", fontsize=9)
        top.set_ylabel("milestone (1-based)")
        top.grid(alpha=0.3)
        top.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
        low.set_title("share of ended episodes that reached each milestone", fontsize=9)
        low.set_xlabel(xlabel)
        low.set_ylim(-0.02, 1.02)
        low.grid(alpha=0.3)
        keys = [Line2D([], [], color=colour[name], lw=1.0, label=name) for name in every]
        if len(far) > 1:
            keys += [Line2D([], [], color="black", lw=1.0, ls=ls, label=Path(run).name) for run, ls in style.items()]
        low.legend(handles=keys, fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
        save(fig, "milestones")
    for run, rows in data.items():  # the action histogram over training, as shares
        hist = [(r[x], r["actions"]) for r in rows if isinstance(r.get("actions"), list) and r.get(x) is not None]
        if not hist or not any(sum(h) for _, h in hist):
            continue
        xs = [h[0] for h in hist]
        shares = [[c / max(1, sum(h)) for c in h] for _, h in hist]
        fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
        ax.stackplot(xs, list(zip(*shares, strict=True)), labels=[f"action {i}" for i in range(len(shares[0]))])
        ax.set_title(f"actions taken{'' if len(data) == 1 else ': ' + Path(run).name}", fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=6, loc="upper right", ncol=2)
        save(fig, "actions" if len(data) == 1 else f"actions_{Path(run).name}")
    # success by start slot, by the depth of the archive cell started from, and the share of the cells' episodes that
    # gained a milestone by the milestones their start held (which segments training solves), all and from entry cells;
    # and where within each level the edge draws
    grids = ((("slot_episodes", "slot_successes"), "success_by_start_slot", "start slot", "success by start slot",
              "success rate"),
             (("archive/depth_episodes", "archive/depth_successes"), "success_by_start_depth",
              "start depth (bins of steps from the task's start)", "success by start depth", "success rate"),
             (("archive/level_episodes", "archive/level_gains"), "gains_by_start_level", "milestones held at the start",
              "cells' episodes that gained a milestone", "share that gained one"),
             (("archive/entry_episodes", "archive/entry_gains"), "gains_from_entry_cells",
              "milestones held at the entry cell",
              "episodes from entry cells that gained a milestone", "share that gained one"),
             (("archive/edge_weights", "archive/edge_won_weights"), "edge_on_winning_cells", "milestones held",
              "the edge's weight on cells that win 1 in 8 or more", "share of the level's edge weight"))
    for run, rows in data.items():
        for keys, name, what, title, label in grids:
            grid = slot_success_grid(rows, *keys)
            if grid is None:
                continue
            steps, rates = grid
            fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
            mesh = ax.pcolormesh(steps, range(len(rates[0]) + 1), [list(c) for c in zip(*rates, strict=True)],
                                 vmin=0, vmax=1, cmap="viridis", shading="flat")
            fig.colorbar(mesh, ax=ax, label=label)
            ax.set_title(f"{title}{'' if len(data) == 1 else ': ' + Path(run).name}", fontsize=9)
            ax.set_xlabel("env-steps")
            ax.set_ylabel(what)
            save(fig, name if len(data) == 1 else f"{name}_{Path(run).name}")
    for run, rows in data.items():  # with level heads: each level head's entropy, up to ln(actions) (uniform)
        grid = slot_success_grid(rows, "samples_by_level", "entropy_by_level", means=True)
        if grid is None:
            continue
        steps, means = grid
        top = max((len(r["actions"]) for r in rows if isinstance(r.get("actions"), list)), default=0)
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        mesh = ax.pcolormesh(steps, range(len(means[0]) + 1), [list(c) for c in zip(*means, strict=True)], vmin=0,
                             vmax=math.log(top) if top > 1 else None, cmap="magma", shading="flat")
        fig.colorbar(mesh, ax=ax, label="mean entropy (nats)")
        ax.set_title(f"policy entropy by shown level{'' if len(data) == 1 else ': ' + Path(run).name}", fontsize=9)
        ax.set_xlabel("env-steps")
        ax.set_ylabel("milestones shown (level head)")
        save(fig, "entropy_by_level" if len(data) == 1 else f"entropy_by_level_{Path(run).name}")
    for run in data:  # the exploration pictures of a run with a state archive
        snap_path = Path(run) / ARCHIVE_NAME if Path(run).is_dir() else Path(run).parent / ARCHIVE_NAME
        if not snap_path.is_file():
            continue
        snap = explore.load(snap_path)
        suffix = "" if len(data) == 1 else f"_{Path(run).name}"
        for tag, img in explore.images(snap).items():
            name = tag.replace("/", "_") + suffix
            if tag in HEAT_MAPS:  # drawn with axes and a colour bar instead of TensorBoard's small picture
                value, title, label, log = HEAT_MAPS[tag]
                title += "" if len(data) == 1 else f": {Path(run).name}"
                fig = heat_map(explore.area_grids(snap, value), title, label, log)
                written.append(write_output(folder / f"{name}.png",
                                            lambda tmp, fig=fig: fig.savefig(tmp, format="png"), inputs=[snap_path]))
                plt.close(fig)
                continue
            written.append(write_output(folder / f"{name}.png",
                                        lambda tmp, img=img: Image.fromarray(img).save(tmp, format="PNG"),
                                        inputs=[snap_path]))
    return written


# explore.images' heat maps drawn as figures: tag -> (the cells' value, title, colour bar label, log scale)
HEAT_MAPS = {"explore/visits": ("visits", "visits of each cell of the state archive", "visits (log scale)", True),
             "explore/depth": ("steps", "depth of each cell: the fewest steps from the task's start found to it",
                               "steps from the start", False)}


def heat_map(grids: list, title: str, label: str, log: bool = False):
    """A matplotlib figure of `explore.area_grids` (area, grid [y, x] with NaN where no cell is): one panel per
    area with its x and y axes, one colour scale over all of them and its colour bar (`label`); empty cells grey."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    finite = np.concatenate([g[np.isfinite(g)] for _, g in grids])
    if log:
        norm = LogNorm(vmin=max(float(finite.min()), 1.0), vmax=max(float(finite.max()), 1.0) + 1e-9)
    else:
        norm = Normalize(vmin=float(finite.min()), vmax=max(float(finite.max()), float(finite.min()) + 1e-9))
    cols = min(len(grids), 4)
    rows = (len(grids) + cols - 1) // cols
    widest = max(g.shape[1] for _, g in grids)
    tallest = max(g.shape[0] for _, g in grids)
    height = min(max(3.2 * tallest / widest, 1.6), 6.4)  # inches a panel 3.2 wide, about square cells
    fig, axes = plt.subplots(rows, cols, figsize=(1.6 + 3.2 * cols, 1.0 + height * rows), dpi=110, squeeze=False,
                             layout="constrained")
    cmap = plt.get_cmap("viridis").with_extremes(bad=(0.85, 0.85, 0.85))
    mesh = None
    for ax, (area, grid) in zip(axes.flat, grids, strict=False):
        shown = np.ma.masked_invalid(np.where(grid > 0, grid, np.nan) if log else grid)
        mesh = ax.imshow(shown, cmap=cmap, norm=norm, origin="upper", interpolation="nearest",
                         extent=(-0.5, grid.shape[1] - 0.5, grid.shape[0] - 0.5, -0.5))
        ax.set_title(f"area {area}", fontsize=9)
        ax.set_xlabel("x", fontsize=8)
        ax.set_ylabel("y", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.yaxis.get_major_locator().set_params(integer=True)
    for ax in axes.flat[len(grids):]:
        ax.axis("off")
    fig.colorbar(mesh, ax=axes, label=label, shrink=0.9)
    fig.suptitle(f"{title}\narea, x, y: the cells' RAM bytes (x, y: map tiles in most games); grey: not reached",
                 fontsize=9)
    return fig


def slot_success_grid(rows: list[dict], episodes: str = "slot_episodes", successes: str = "slot_successes",
                      means: bool = False):
    """(env-step edges, per update the success rate of each start slot, NaN where none ended) from the
    `slot_episodes` / `slot_successes` of a run's log (or other per-bin lists; with `means` the second list holds
    each bin's mean itself, as `entropy_by_level` beside `samples_by_level`), or None when it has none."""
    rows = [r for r in rows if r.get(episodes) and r.get(successes) and r.get("env_steps") is not None]
    if not rows:
        return None
    edges = [0] + [r["env_steps"] for r in rows]
    rates = [[(s if means else s / e) if e else float("nan") for e, s in zip(r[episodes], r[successes], strict=True)]
             for r in rows]
    return edges, rates
