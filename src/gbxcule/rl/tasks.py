"""Task packs: an RL task is data (a TOML file), not code.

A pack names its ROM (a built-in ROM's name, or the SHA-1 of a ROM the user supplies), the action codec and
schedule, and its tasks. A task says where episodes start (a button script from power-on, save-state files,
or a generator of several start states), what ends them (RAM conditions, a pixel goal template, the step
limit) and the reward knobs. `load_task("leave_house")` looks in the built-in packs (`rl/packs/*.toml`);
`load_task("path/to/pack.toml:name")` reads a pack file. docs/rl_env.md has the format.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from gbxcule.core.action_codec import ActionCodec, get_codec
from gbxcule.core.errors import GbxculeError
from gbxcule.rl.goals import GoalError, RamCondition, RewardConfig, ram_offset

SCRIPT_LETTERS = {"N": (), "A": ("a",), "B": ("b",), "S": ("start",), "E": ("select",), "U": ("up",),
                  "D": ("down",), "L": ("left",), "R": ("right",)}
START_GENERATORS = ("random_noops", "random_actions", "solution")


class TaskError(GbxculeError, ValueError):
    """An unknown task, or a pack file that cannot be read."""


def parse_script(text: str, codec: ActionCodec) -> tuple[int, ...]:
    """Action indices of a script such as "N5 R4 D6 R" under `codec` (letters: `SCRIPT_LETTERS`)."""
    by_buttons = {buttons: i for i, buttons in enumerate(codec.actions)}
    out: list[int] = []
    for token in str(text).split():
        letter, count = token[0].upper(), token[1:]
        if letter not in SCRIPT_LETTERS or not (count == "" or count.isdigit()):
            raise TaskError(f"bad script token {token!r} (letters {''.join(SCRIPT_LETTERS)}, then a count)")
        buttons = SCRIPT_LETTERS[letter]
        if buttons not in by_buttons:
            raise TaskError(f"script letter {letter!r} has no action in codec {codec.name}")
        out += [by_buttons[buttons]] * int(count or 1)
    return tuple(out)


@dataclass(frozen=True)
class StartSpec:
    """Where episodes start. `script`: actions from power-on. `states`: save-state files or folders (PyBoy
    `.state` or gbxcule snapshots), each a start slot. `generator`: `count` states reached
    from the script's end (or the states) by a random number (0..`max_len`) of extra steps: NOOPs for
    "random_noops" (Atari's no-op starts), uniformly random actions for "random_actions". "solution"
    (demonstration starts, as in Backplay): slot i first replays the first i/count of `prefix` (the task's
    solution), then random actions, so episodes start all along the demonstrated route; reward and episode
    ends do not change, and evaluation still starts from the task's start."""

    script: tuple[int, ...] = ()
    states: tuple[str, ...] = ()
    generator: str | None = None
    count: int = 1
    max_len: int = 8
    prefix: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.generator is not None and self.generator not in START_GENERATORS:
            raise TaskError(f"unknown start-state generator {self.generator!r}; known: {', '.join(START_GENERATORS)}")
        if self.generator == "solution" and not self.prefix:
            raise TaskError("start-state generator 'solution' needs a task with a solution")
        if self.count < 1 or self.max_len < 0:
            raise TaskError(f"start-state generator needs count >= 1 and max_len >= 0, got {self.count}, "
                            f"{self.max_len}")


@dataclass(frozen=True)
class Milestone:
    """A named progress event of a task that, once it holds, counts as reached for the rest of the episode: a RAM
    condition (an event flag), or a screen: a goal template file (relative to the pack) whose distance to the newest
    frame is under `tau` (the template's own where None; docs/rl_env.md "Milestones")."""

    name: str
    condition: RamCondition | None = None
    template: str | None = None
    tau: float | None = None


@dataclass(frozen=True)
class CellDetail:
    """What a place alone does not tell: while every `when` condition holds (e.g. a fight), the `cells` bytes
    (e.g. both sides' HP) are part of the state archive's cell as well (docs/rl_env.md "Cell detail")."""

    when: tuple[RamCondition, ...]
    cells: tuple[int, ...]


@dataclass(frozen=True)
class Lives:
    """A byte that counts the player's lives (`lost = "down"`: a life is lost when it falls) or losses (`"up"`:
    when it rises), read modulo 256 (a step of 1..127 up is a rise): what `reward.life_lost` and `env.life_ends`
    read (docs/rl_env.md "Lives")."""

    addr: int
    lost: str = "down"


@dataclass(frozen=True)
class Task:
    name: str
    pack: str
    description: str = ""
    rom: str | None = None  # a built-in ROM's name
    rom_sha1: str | None = None  # the ROM the task is for (a built-in ROM's SHA-1 is computed when built)
    codec: str = "pokemonred_puffer_v1"
    frames_per_step: int = 24
    release_after_frames: int = 8
    start: StartSpec = field(default_factory=StartSpec)
    step_limit: int = 1000
    solution: tuple[int, ...] | None = None
    goal_ram: tuple[RamCondition, ...] = ()
    template: str | None = None  # "solution" (captured from the solution's last frame) or a template file
    reward: dict = field(default_factory=dict)
    novelty_ram: tuple[int, ...] = ()
    base_dir: str = "."  # relative paths in the pack resolve against this folder
    cells: tuple[int, ...] = ()  # RAM bytes naming a place, area first (the state archive's cells; rl/archive.py)
    milestones: tuple[Milestone, ...] = ()  # progress events in chain order, each rewarded once per episode
    fail_ram: tuple[RamCondition, ...] = ()  # the task can no longer be won: the episode ends, unsuccessful
    cell_detail: CellDetail | None = None  # bytes added to the cell while a condition holds (rl/archive.py)
    lives: Lives | None = None  # the byte whose change says a life was lost (a fight lost, a fall)

    @property
    def id(self) -> str:
        return f"{self.pack}:{self.name}"

    def reward_config(self, overrides: dict | None = None) -> RewardConfig:
        return RewardConfig.from_dict({**self.reward, **(overrides or {})})


def _ram_conditions(items, where: str, key: str = "goal_ram") -> tuple[RamCondition, ...]:
    if items is not None and not isinstance(items, list | tuple):
        raise TaskError(f"{where}: {key} must be a list of tables")
    out = []
    for item in items or ():
        if not isinstance(item, dict) or "addr" not in item or "value" not in item:
            raise TaskError(f"{where}: each {key} entry needs addr and value")
        unknown = set(item) - {"addr", "value", "mask", "op"}
        if unknown:
            raise TaskError(f"{where}: unknown {key} key(s) {', '.join(sorted(unknown))}")
        out.append(RamCondition(int(item["addr"]), int(item["value"]), int(item.get("mask", 0xFF)),
                                str(item.get("op", "eq"))))
    return tuple(out)


def _screen_milestone(name: str, item: dict, where: str) -> Milestone:
    unknown = set(item) - {"template", "tau"}
    if unknown:
        raise TaskError(f"{where}: a template milestone takes template and tau, not {', '.join(sorted(unknown))}")
    tpl, tau = item["template"], item.get("tau")
    if not isinstance(tpl, str) or not tpl:
        raise TaskError(f"{where}: template must be a template file's name, got {tpl!r}")
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, int | float) or not 0 < tau <= 1):
        raise TaskError(f"{where}: tau must be a number in (0, 1], got {tau!r}")
    return Milestone(name, template=tpl, tau=None if tau is None else float(tau))


def _milestones(items, where: str) -> tuple[Milestone, ...]:
    """`milestones = [{ name = "...", addr = ..., mask = ..., value = ..., op = ... }, ...]` (RAM event flags) or
    `{ name = "...", template = "file.npz", tau = ... }` (a screen) entries, in chain order."""
    if not isinstance(items, list | tuple):
        raise TaskError(f"{where}: milestones must be a list of tables")
    out, names = [], set()
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise TaskError(f"{where}: milestone {i + 1} needs a name (a string)")
        name = item["name"]
        if name in names:
            raise TaskError(f"{where}: milestone name {name!r} is given twice")
        names.add(name)
        rest = {k: v for k, v in item.items() if k != "name"}
        if "template" in rest:
            out.append(_screen_milestone(name, rest, f"{where}: milestone {name}"))
            continue
        (cond,) = _ram_conditions([rest], f"{where}: milestone {name}", "milestones")
        out.append(Milestone(name, cond))
    if len(out) > 32:
        raise TaskError(f"{where}: at most 32 milestones, got {len(out)}")
    return tuple(out)


MAX_KEY_BYTES = 7  # a cell's place and detail bytes together: one int64 key with a bit to spare


def _cell_detail(task: dict, pack: dict, place: tuple[int, ...], where: str) -> CellDetail | None:
    """`cell_detail = { when = [conditions], cells = [addresses] }` of the task, else of its pack."""
    d = task.get("cell_detail", pack.get("cell_detail"))
    if d is None:
        return None
    if not isinstance(d, dict) or set(d) != {"when", "cells"}:
        raise TaskError(f"{where}: cell_detail must be a table of when (a list of RAM conditions) and cells (a list "
                        "of addresses)")
    when = _ram_conditions(d["when"], where, "cell_detail.when")
    cells = _ram_bytes(d, {}, "cells", f"{where}: cell_detail")
    if not when or not cells:
        raise TaskError(f"{where}: cell_detail needs at least one condition in when and one address in cells")
    if len(place) + len(cells) > MAX_KEY_BYTES:
        raise TaskError(f"{where}: cell_detail's cells and the place's bytes ({len(place)}) are at most "
                        f"{MAX_KEY_BYTES} together, got {len(place) + len(cells)}")
    return CellDetail(when, cells)


def _lives(task: dict, pack: dict, where: str) -> Lives | None:
    """`lives = { addr = ADDRESS, lost = "down" | "up" }` of the task, else of its pack."""
    d = task.get("lives", pack.get("lives"))
    if d is None:
        return None
    if not isinstance(d, dict) or "addr" not in d or set(d) - {"addr", "lost"}:
        raise TaskError(f"{where}: lives must be a table of addr and lost (\"down\": a lives counter, \"up\": a "
                        "losses counter)")
    lost = d.get("lost", "down")
    if lost not in ("down", "up"):
        raise TaskError(f"{where}: lives.lost must be \"down\" or \"up\", got {lost!r}")
    addr = d["addr"]
    if not isinstance(addr, int) or isinstance(addr, bool):
        raise TaskError(f"{where}: lives.addr must be an address, got {addr!r}")
    ram_offset(addr, f"{where}: lives")
    return Lives(addr, lost)


def _ram_bytes(task: dict, pack: dict, key: str, where: str) -> tuple[int, ...]:
    """A task's (else its pack's) list of at most 8 WRAM/HRAM addresses under `key`."""
    addrs = task.get(key, pack.get(key, ()))
    if not isinstance(addrs, list | tuple) or not all(isinstance(a, int) and not isinstance(a, bool) for a in addrs):
        raise TaskError(f"{where}: {key} must be a list of addresses")
    for a in addrs:
        ram_offset(a, f"{where}: {key}")
    if len(addrs) > 8:
        raise TaskError(f"{where}: {key} names at most 8 bytes")
    return tuple(int(a) for a in addrs)


_TASK_KEYS = {"description", "start", "step_limit", "solution", "goal_ram", "template", "reward", "novelty_ram",
              "codec", "frames_per_step", "release_after_frames", "cells", "cell_detail", "milestones", "fail_ram",
              "lives"}
_PACK_KEYS = {"name", "rom", "rom_sha1", "codec", "frames_per_step", "release_after_frames", "novelty_ram", "cells",
              "cell_detail", "milestones", "fail_ram", "lives"}


def parse_pack(text: str, where: str, base_dir: str = ".") -> dict[str, Task]:
    """Tasks of a pack file's text, checked completely (a bad pack is one TaskError line)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{where}: not valid TOML ({exc})") from None
    pack = data.get("pack", {})
    tasks = data.get("tasks", {})
    if not isinstance(pack, dict) or not isinstance(tasks, dict) or not tasks:
        raise TaskError(f"{where}: a pack needs a [pack] table and at least one [tasks.NAME] table")
    unknown = set(pack) - _PACK_KEYS
    if unknown:
        raise TaskError(f"{where}: unknown [pack] key(s) {', '.join(sorted(unknown))}")
    name = str(pack.get("name", Path(where).stem))
    out = {}
    for tname, t in tasks.items():
        w = f"{where}: task {tname}"
        if not isinstance(t, dict):
            raise TaskError(f"{w} must be a table")
        bad = set(t) - _TASK_KEYS
        if bad:
            raise TaskError(f"{w}: unknown key(s) {', '.join(sorted(bad))}")
        try:
            codec = get_codec(str(t.get("codec", pack.get("codec", "pokemonred_puffer_v1"))))
        except ValueError as exc:
            raise TaskError(f"{w}: {exc}") from None
        s = t.get("start", {})
        if not isinstance(s, dict) or set(s) - {"script", "states", "generator", "count", "max_len"}:
            raise TaskError(f"{w}: start takes script, states, generator, count, max_len")
        states = s.get("states", ())
        states = (states,) if isinstance(states, str) else tuple(str(x) for x in states)
        try:
            start = StartSpec(parse_script(s.get("script", ""), codec), states, s.get("generator"),
                              int(s.get("count", 1)), int(s.get("max_len", 8)))
            sol = t.get("solution")
            novelty = _ram_bytes(t, pack, "novelty_ram", w)
            cells = _ram_bytes(t, pack, "cells", w)
            detail = _cell_detail(t, pack, cells or novelty, w)
            reward = dict(t.get("reward", {}))
            RewardConfig.from_dict(reward)
            task = Task(tname, name, str(t.get("description", "")), pack.get("rom"), pack.get("rom_sha1"),
                        codec.name, int(t.get("frames_per_step", pack.get("frames_per_step", 24))),
                        int(t.get("release_after_frames", pack.get("release_after_frames", 8))), start,
                        int(t.get("step_limit", 1000)), None if sol is None else parse_script(sol, codec),
                        _ram_conditions(t.get("goal_ram"), w), t.get("template"), reward, novelty, base_dir, cells,
                        _milestones(t.get("milestones", pack.get("milestones", ())), w),
                        _ram_conditions(t.get("fail_ram", pack.get("fail_ram")), w, "fail_ram"), detail,
                        _lives(t, pack, w))
        except GoalError as exc:
            raise TaskError(f"{w}: {exc}") from None
        if task.step_limit < 1:
            raise TaskError(f"{w}: step_limit must be >= 1")
        if not task.goal_ram and task.template is None:
            raise TaskError(f"{w}: needs a goal (goal_ram and/or template)")
        if task.template == "solution" and not task.solution:
            raise TaskError(f"{w}: template = \"solution\" needs a solution")
        if not (task.start.script or task.start.states or task.start.generator) and task.start.count == 1:
            pass  # power-on start
        out[tname] = task
    return out


@cache
def builtin_packs() -> dict[str, dict[str, Task]]:
    folder = resources.files("gbxcule.rl") / "packs"
    packs = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            tasks = parse_pack(entry.read_text(), f"built-in pack {entry.name}")
            packs[next(iter(tasks.values())).pack] = tasks
    return packs


def load_pack(path: str | Path) -> dict[str, Task]:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read task pack {p}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_pack(text, str(p), str(p.resolve().parent))


def load_task(spec: str | Task) -> Task:
    """A task by name ("leave_house", "overworld:leave_house") or from a pack file ("pack.toml:name")."""
    if isinstance(spec, Task):
        return spec
    spec = str(spec)
    if ".toml" in spec:
        path, _, name = spec.rpartition(":") if spec.rfind(":") > spec.rfind(".toml") else (spec, "", "")
        tasks = load_pack(path)
        if not name:
            if len(tasks) != 1:
                raise TaskError(f"{path} holds several tasks ({', '.join(tasks)}): name one as {path}:NAME")
            return next(iter(tasks.values()))
        if name not in tasks:
            raise TaskError(f"no task {name!r} in {path}; it has {', '.join(tasks)}")
        return tasks[name]
    packs = builtin_packs()
    pack, _, name = spec.rpartition(":")
    if pack:
        if pack not in packs or name not in packs[pack]:
            raise TaskError(f"unknown task {spec!r}; known: {', '.join(known_tasks())}")
        return packs[pack][name]
    for tasks in packs.values():  # packs in name order: overworld before pokemon_red
        if name in tasks:
            return tasks[name]
    raise TaskError(f"unknown task {spec!r}; known: {', '.join(known_tasks())}")


def task_files(spec: str | Task | None) -> list[Path]:
    """The files a task reads: its pack file (a "pack.toml:name" spec), its start-state files or folders and its
    goal template file, as the pack names them and resolved against the pack's folder. A command that runs the
    task gives them to the output guard as its inputs (core/outputs.py); a spec that does not load names none."""
    if spec is None:
        return []
    files = []
    if isinstance(spec, str) and ".toml" in spec:
        files.append(Path(spec.rpartition(":")[0] if spec.rfind(":") > spec.rfind(".toml") else spec))
    try:
        task = load_task(spec)
    except GbxculeError:
        return files
    named = [*task.start.states, *([task.template] if task.template not in (None, "solution") else []),
             *(m.template for m in task.milestones if m.template)]
    for name in named:
        files += [Path(name), Path(task.base_dir) / name]
    return files


def known_tasks() -> list[str]:
    return [t.id for tasks in builtin_packs().values() for t in tasks.values()]
