"""`gbxcule goal capture|show|calibrate`: make, inspect and tune goal templates (docs/rl_env.md).

- `capture`: run one env from a task's start (or a ROM and a start state) through an action script or a
  recorded trace; save the observation at the end as a goal template (.npz) with its metadata, and the full
  screen as a PNG.
- `show`: print a template's metadata; write its frames and mask, scaled up, as a PNG (with `--task`, beside
  the nearest off-goal frames of a short random play).
- `calibrate`: distances to a template along the task's solution, the wait after it (the goal's own noise) and
  random play; say whether goal and off-goal frames separate; suggest tau (never below the noise) and
  k_consecutive; print the distributions as a table, write a histogram PNG and a PNG of the goal beside the
  nearest off-goal frames. `capture` and `calibrate` say when the screen is still changing at the goal frame.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gbxcule.cli import checks
from gbxcule.cli.common import parse_start_states
from gbxcule.core.errors import GbxculeError
from gbxcule.core.outputs import write_output
from gbxcule.core.screen import OBS_VIEWS

BINS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0001)
SCALE = 4  # pixels per observation pixel in written sheets (72x80 -> 288x320)


def register(sub) -> None:
    p = sub.add_parser("goal", help="capture, show and calibrate goal templates of RL tasks",
                       description=__doc__.splitlines()[0])
    gsub = p.add_subparsers(dest="goal_command", metavar="ACTION", required=True)

    c = gsub.add_parser("capture", help="save the frame at the end of an action script as a goal template")
    c.add_argument("--task", help="task (name, or pack.toml:name) whose start, ROM and config to use")
    c.add_argument("--rom", help="ROM file or built-in ROM name (default: the task's)")
    c.add_argument("--start-state", metavar="FILE", help="start from this state (PyBoy .state or gbxcule snapshot)")
    src = c.add_mutually_exclusive_group()
    src.add_argument("--actions", metavar="SCRIPT", help='action script, e.g. "R4 D6 R N2" (default: the task\'s '
                                                         "solution)")
    src.add_argument("--trace", metavar="FILE", help="recorded trace: a script, action indices, or a JSON list")
    c.add_argument("--stack-k", type=int, default=1, help="frame stack of the envs it is for (default 1)")
    c.add_argument("--obs", default="pixels", choices=("pixels", "packed"), help="observation mode (default pixels)")
    c.add_argument("--view", default="stride", choices=OBS_VIEWS,
                   help="how the envs' frames sample the screen (env.obs_view; default stride)")
    c.add_argument("--mask-box", metavar="R0,C0,R1,C1", help="count only the 72x80 pixels in rows R0..R1-1 and "
                                                             "columns C0..C1-1 (default: all)")
    c.add_argument("--name", default="", help="the task name stored in the metadata (default: the task's)")
    c.add_argument("--out", required=True, help="template file to write (.npz)")
    c.add_argument("--png", help="PNG of the full screen at the goal (default: OUT with .png)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=capture_cmd)

    s = gsub.add_parser("show", help="print a template's metadata and write its frames as a PNG")
    s.add_argument("template", help="template file")
    s.add_argument("--png", help="PNG to write: its frames and mask side by side, scaled up (default: none)")
    s.add_argument("--task", help="also play at random from this task's start and put the nearest off-goal "
                                  "frames beside the goal in the PNG")
    s.add_argument("--rom", help="ROM file or built-in ROM name for --task (default: the task's)")
    s.add_argument("--envs", type=int, default=16, help="random-play envs for --task (default 16)")
    s.add_argument("--steps", type=int, default=None, help="random-play steps for --task (default "
                                                           "min(step_limit, 50))")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=show_cmd)

    k = gsub.add_parser("calibrate", help="distances along the solution and random play; suggest tau")
    k.add_argument("template", help="template file")
    k.add_argument("--task", required=True, help="the task (its start, solution and RAM goal)")
    k.add_argument("--rom", help="ROM file or built-in ROM name (default: the task's)")
    k.add_argument("--envs", type=int, default=64, help="random-play envs (default 64)")
    k.add_argument("--steps", type=int, default=None, help="random-play steps (default min(step_limit, 200))")
    k.add_argument("--seed", type=int, default=0, help="seed of the random play (default 0)")
    k.add_argument("--start-states", metavar="SPEC",
                   help="where random play starts: the task's start (default), a state file or folder, "
                        "random_actions:K[:LEN], solution:K[:LEN] (all along the solution's route)")
    k.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    k.add_argument("--plot", help="histogram PNG (default: TEMPLATE with _calibrate.png)")
    k.add_argument("--nearest-png", help="PNG of the goal beside the nearest off-goal frames (default: TEMPLATE "
                                         "with _nearest.png)")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(func=calibrate_cmd)


def _torch():
    try:
        import torch
    except ImportError:
        raise GbxculeError("goal templates need torch: pip install -e .[rl]") from None
    return torch


def parse_trace(text: str, codec, where: str) -> tuple[int, ...]:
    """Actions of a trace: a JSON list of indices, whitespace/comma-separated indices, or a script."""
    from gbxcule.rl.tasks import parse_script

    text = text.strip()
    if not text:
        raise GbxculeError(f"{where}: no actions")
    if text.startswith("["):
        try:
            acts = [int(a) for a in json.loads(text)]
        except (ValueError, TypeError):
            raise GbxculeError(f"{where}: not a JSON list of action indices") from None
    elif text.replace(",", " ").replace("-", "").split()[0].isdigit():
        try:
            acts = [int(a) for a in text.replace(",", " ").split()]
        except ValueError:
            raise GbxculeError(f"{where}: not a list of action indices") from None
    else:
        acts = list(parse_script(text, codec))
    bad = [a for a in acts if not 0 <= a < codec.num_actions]
    if bad:
        raise GbxculeError(f"{where}: action {bad[0]} out of range for codec {codec.name} "
                           f"({codec.num_actions} actions)")
    return tuple(acts)


def _mask(box: str | None) -> np.ndarray | None:
    if not box:
        return None
    try:
        r0, c0, r1, c1 = (int(x) for x in box.split(","))
    except ValueError:
        raise GbxculeError(f"--mask-box must be R0,C0,R1,C1, got {box!r}") from None
    if not (0 <= r0 < r1 <= 72 and 0 <= c0 < c1 <= 80):
        raise GbxculeError(f"--mask-box {box} is empty or outside the 72x80 observation")
    m = np.zeros((72, 80), dtype=bool)
    m[r0:r1, c0:c1] = True
    return m


def capture_cmd(args) -> int:
    from gbxcule.cli.report import emit

    _torch()
    from gbxcule.core.action_codec import get_codec
    from gbxcule.rl.tasks import StartSpec, Task, load_task, task_files
    from gbxcule.rl.templates import capture

    checks.positive(stack_k=args.stack_k)
    if not args.task and not args.rom:
        raise GbxculeError("give --task, or --rom with --actions or --trace")
    task = load_task(args.task) if args.task else Task(args.name or "custom", "cli")
    codec = get_codec(task.codec)
    rom_in = checks.rom_path(args.rom) if args.rom else None
    inputs = (rom_in, args.start_state, args.trace, *task_files(args.task))
    out = Path(args.out)
    png = Path(args.png) if args.png else out.with_suffix(".png")
    checks.check_outputs([out, png], inputs)
    if args.trace:
        try:
            text = Path(args.trace).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise GbxculeError(f"cannot read trace {args.trace}: {getattr(exc, 'strerror', None) or exc}") from None
        actions = parse_trace(text, codec, args.trace)
    elif args.actions:
        actions = parse_trace(args.actions, codec, "--actions")
    else:
        actions = None
    if actions is None and not task.solution:
        raise GbxculeError("give --actions or --trace (the task has no solution)")
    rom = checks.rom_file(args.rom, "goal capture") if args.rom else None
    start = [args.start_state] if args.start_state else None
    if args.name:
        import dataclasses

        task = dataclasses.replace(task, name=args.name)
    if task.start == StartSpec() and start is None and args.task is None:
        start = "power_on"
    tpl, report = capture(task, actions, rom=rom, stack_k=args.stack_k, obs=args.obs, mask=_mask(args.mask_box),
                          start_states=start, view=args.view)
    from gbxcule.core.screen import write_png
    from gbxcule.rl.templates import replay

    after = replay(task, tpl, actions, rom=rom, start_states=start)
    written = write_output(out, tpl.to_bytes(), inputs)
    png_written = write_output(png, lambda p: write_png(report["full_frame"], p), inputs)
    data = {"template": str(written), "png": str(png_written), "steps": report["steps"], "start": report["start"],
            "ram_goal_holds": report["ram_goal_holds"], "mid_transition": after["mid_transition"],
            "settled_distance": after["settled_distance"], "settle_spread": after["spread"], "meta": _meta(tpl)}
    emit(args, data, lambda d: f"captured {d['template']} after {d['steps']} steps from {d['start']}"
         + ("" if d["ram_goal_holds"] is None else f" (RAM goal {'holds' if d['ram_goal_holds'] else 'does NOT hold'})")
         + f"\nscreen: {d['png']}" + (f"\n{transition_hint(d)}" if d["mid_transition"] else ""))
    return 0


def transition_hint(d: dict) -> str:
    """The one line that says a capture ended mid-transition (a report with settled_distance, settle_spread)."""
    from gbxcule.rl.templates import HOLD_STEPS

    return (f"warning: the screen was still changing at the goal frame: {HOLD_STEPS} NOOP steps later it is "
            f"{d['settled_distance']:.3f} from the template (it varies by {d['settle_spread']:.3f} on its own), so "
            f"the template never matches the settled screen; end the actions with a wait (e.g. add N4) and capture "
            f"again")


def _meta(tpl) -> dict:
    import dataclasses

    return dataclasses.asdict(tpl.meta) | {"frames": len(tpl.frames), "mask_pixels": int(tpl.mask.sum())}


def sheet(panels, scale: int = SCALE):
    """A PIL image of shade frames side by side, each scaled `scale` times with its label above it."""
    from PIL import Image, ImageDraw, ImageFont

    from gbxcule.core.screen import to_image

    label_h, gap = 22, 6
    font = ImageFont.load_default(size=16)
    w = sum(f.shape[1] * scale for f, _ in panels) + gap * (len(panels) + 1)
    h = max(f.shape[0] * scale for f, _ in panels) + label_h + 2 * gap
    img = Image.new("RGB", (w, h), (200, 200, 200))
    draw, x = ImageDraw.Draw(img), gap
    for frame, label in panels:
        pic = to_image(frame).convert("RGB").resize((frame.shape[1] * scale, frame.shape[0] * scale),
                                                    Image.Resampling.NEAREST)
        draw.text((x, gap // 2), label, fill="black", font=font)
        img.paste(pic, (x, label_h + gap))
        x += pic.width + gap
    return img


def goal_panels(tpl) -> list:
    """The template's frames and its mask (counted pixels white) as labelled panels."""
    frames = [(f, "goal" if len(tpl.frames) == 1 else f"goal frame {i}") for i, f in enumerate(tpl.frames)]
    return [*frames, (np.where(tpl.mask, 0, 3).astype(np.uint8), f"mask ({int(tpl.mask.sum())} px counted, white)")]


def nearest_panels(r: dict) -> list:
    """A calibration's nearest off-goal frames as labelled panels."""
    what = "off-goal" if r["has_ram_goal"] else "nearest"
    return [(f, f"{what} {d:.4f}") for d, f in r["nearest"]]


def show_cmd(args) -> int:
    from gbxcule.cli.report import emit
    from gbxcule.rl.goals import GoalTemplate

    checks.positive(envs=args.envs, steps=args.steps)
    tpl = GoalTemplate.load(args.template)
    data = _meta(tpl)
    if args.task and not args.png:
        raise GbxculeError("--task puts the nearest off-goal frames into the PNG: give --png")
    if args.png:
        from gbxcule.rl.tasks import task_files

        inputs = (args.template, checks.rom_path(args.rom) if args.rom else None, *task_files(args.task))
        png = checks.check_output(args.png, inputs)
        panels = goal_panels(tpl)
        if args.task:
            from gbxcule.rl.tasks import load_task
            from gbxcule.rl.templates import calibrate

            _torch()
            task = load_task(args.task)
            r = calibrate(task, tpl, num_envs=args.envs, steps=args.steps or min(task.step_limit, 50),
                          rom=checks.rom_file(args.rom, "goal show") if args.rom else None)
            panels = panels[:len(tpl.frames)] + nearest_panels(r) + panels[len(tpl.frames):]
            data["nearest_distances"] = [d for d, _ in r["nearest"]]
        data["png"] = str(write_output(png, lambda p: sheet(panels).save(p, format="PNG"), inputs))
    emit(args, data, lambda d: "\n".join(f"{k:22s} {v}" for k, v in d.items()))
    return 0


def histogram(values, bins=BINS) -> list[int]:
    return np.histogram(np.asarray(values, dtype=float), bins=np.asarray(bins))[0].astype(int).tolist()


def calibrate_table(r: dict) -> str:
    rows = [f"{'distance':>13s} {'solution':>9s} {'random':>9s} {'rand@goal':>9s}"]
    sol, rnd, at = histogram(r["solution_distances"]), histogram(r["random_distances"]), r["at_goal_hist"]
    for i in range(len(BINS) - 1):
        rows.append(f"{BINS[i]:5.2f}-{min(BINS[i + 1], 1):5.2f}  {sol[i]:9d} {rnd[i]:9d} {at[i]:9d}")
    rows.append(f"suggested tau {r['suggested_tau']:.4f}, k_consecutive {r['suggested_k_consecutive']} "
                f"(goal max {r['goal_max']:.4f}, off-goal min {r['off_goal_min']:.4f}; off-goal states under tau: "
                f"{r['false_fires_at_tau']})")
    rows.append(verdict_line(r))
    if r["mid_transition"]:
        rows.append(transition_hint(r))
    return "\n".join(rows)


def verdict_line(r: dict) -> str:
    """Whether the template tells the goal from everything else, said plainly."""
    pics = f"look at them in {r['nearest_png']}" if r.get("nearest_png") else "see the nearest frames"
    noise = (f"the goal's own frames lie within {r['noise']:.4f} of the template (the wait after the solution"
             + (" and random play at the goal)" if r["has_ram_goal"] else ")"))
    if r["verdict"] == "separated":
        return (f"separated: {noise}; the nearest off-goal frame is {r['off_goal_min']:.4f} away, so tau "
                f"{r['suggested_tau']:.4f} fires at the goal and on no off-goal frame seen")
    if r["verdict"] == "NOT separated":
        return (f"NOT separated: {r['within_noise']} off-goal frame(s) lie as near the template as the goal's own "
                f"(nearest {r['off_goal_min']:.4f}; {noise}): no tau tells them apart ({pics}). Count only the "
                f"pixels that differ (--mask-box), capture another goal frame, or end episodes on the RAM goal "
                f"(reward.terminate_on = \"ram\"); k_consecutive {r['suggested_k_consecutive']} only outlasts the "
                f"off-goal runs seen here")
    near = (f"{r['within_noise']} random-play frame(s) lie as near ({pics}): if one is not the goal, the template "
            f"fires there at any tau the goal needs" if r["within_noise"] else
            f"no random-play frame came as near ({pics} for the nearest)")
    return (f"unchecked: the task has no RAM goal, so calibrate cannot tell the goal from a look-alike; {noise}, "
            f"and {near}. Give the task a RAM goal (gbxcule ram) to check")


def calibration_plot(r: dict, path) -> None:
    """Histograms of the distances (random off-goal in blue, solution in red) and tau (a green line)."""
    from PIL import Image, ImageDraw

    w, h, pad, nb = 640, 360, 40, 50
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    edges = np.linspace(0, 1, nb + 1)
    series = [(np.histogram(r["random_distances"], edges)[0], (31, 119, 180)),
              (np.histogram(r["solution_distances"], edges)[0], (214, 39, 40))]
    d.rectangle([pad, pad, w - pad, h - pad], outline="black")
    bw = (w - 2 * pad) / nb
    for counts, colour in series:
        top = max(int(counts.max()), 1) if len(counts) else 1
        for i, c in enumerate(counts):
            if c:
                y = h - pad - (h - 2 * pad) * (c / top)
                d.rectangle([pad + i * bw + 1, y, pad + (i + 1) * bw - 1, h - pad], outline=colour)
    x = pad + r["suggested_tau"] * (w - 2 * pad)
    d.line([x, pad, x, h - pad], fill=(44, 160, 44), width=2)
    d.text((pad, 10), f"{r['task']}: distance to the template (blue random, red solution, green tau "
                      f"{r['suggested_tau']:.3f}); bars scaled per series", fill="black")
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        d.text((pad + t * (w - 2 * pad) - 8, h - pad + 6), f"{t:.2f}", fill="black")
    img.save(path, format="PNG")


def calibrate_cmd(args) -> int:
    from gbxcule.cli.report import emit

    _torch()
    from gbxcule.rl.goals import GoalTemplate
    from gbxcule.rl.tasks import load_task, task_files
    from gbxcule.rl.templates import calibrate

    checks.positive(envs=args.envs, steps=args.steps)
    task = load_task(args.task)
    tpl = GoalTemplate.load(args.template)
    rom_in = checks.rom_path(args.rom) if args.rom else None
    starts = parse_start_states(args.start_states)
    state_file = starts if isinstance(starts, str) and starts != "power_on" else None  # a state file or folder
    inputs = (args.template, rom_in, state_file, *task_files(args.task))
    stem = Path(args.template).stem
    plot = Path(args.plot or Path(args.template).with_name(stem + "_calibrate.png"))
    near_png = Path(args.nearest_png or Path(args.template).with_name(stem + "_nearest.png"))
    checks.check_outputs([plot, near_png], inputs)
    rom = checks.rom_file(args.rom, "goal calibrate") if args.rom else None
    r = calibrate(task, tpl, num_envs=args.envs, steps=args.steps, device=args.device, seed=args.seed, rom=rom,
                  start_states=starts)
    r["at_goal_hist"] = histogram(r.pop("random_at_goal_distances"))
    r["plot"] = str(write_output(plot, lambda p: calibration_plot(r, p), inputs))
    panels = goal_panels(tpl)[:len(tpl.frames)] + nearest_panels(r)
    r["nearest_png"] = str(write_output(near_png, lambda p: sheet(panels).save(p, format="PNG"), inputs))
    r["nearest"] = [d for d, _ in r["nearest"]]
    r["bins"] = list(BINS)
    r["solution_hist"], r["random_hist"] = histogram(r["solution_distances"]), histogram(r["random_distances"])
    rnd = r.pop("random_distances")
    emit(args, {k: v for k, v in r.items() if k != "random_p"} | {"random_p": {str(q): v for q, v in
                                                                              r["random_p"].items()}},
         lambda d: calibrate_table(d | {"random_distances": rnd}) + f"\nplot: {d['plot']}\npictures of the goal "
                   f"and the nearest off-goal frames: {d['nearest_png']}")
    return 0
