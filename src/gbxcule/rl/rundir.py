"""The run folder: config.json, facts.json, metrics.jsonl, TensorBoard events, checkpoint.pt, policy.pt,
best_policy.pt, summary.json, eval.json; and reading a checkpoint back (docs/training.md "Checkpoints").

Every file is written atomically (`core.outputs.write_output`): a kill leaves the old file or the new one. A fresh
run never writes into an old run's files, and a resumed run continues only its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from gbxcule.core.errors import GbxculeError
from gbxcule.core.fmt import json_safe
from gbxcule.core.outputs import RUN_FILES, check_output_dir, write_output

CHECKPOINT_NAME = "checkpoint.pt"
POLICY_NAME = "policy.pt"
BEST_NAME = "best_policy.pt"  # the weights of the best periodic greedy eval so far (policy.pt's format)
CHECKPOINT_FORMAT = 1
ARCHIVE_NAME = "archive.npz"  # the state archive's cells and screens, written with each checkpoint
SAVE_NOW_NAME = "checkpoint.now"  # a file anyone may put in a running run's folder: a checkpoint at the update's
# end, then the file is removed (scripts/gpu/gpu.sh jobs_wait asks so before it packs a lent machine's runs)
# RUN_FILES (core/outputs.py): every entry a run folder may hold, which every command's output guard protects


class CheckpointError(GbxculeError):
    """A checkpoint that cannot be read or does not fit the run."""


def dumps(payload: Any, indent: int | None = 2) -> str:
    """Strict JSON (NaN and infinities as null), the only way run files are written."""
    return json.dumps(json_safe(payload), indent=indent, default=str, allow_nan=False, sort_keys=indent is None)


def run_facts() -> dict:
    """Package versions, GPU, host and git revision, recorded at the start of every run."""
    import torch

    facts: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "host": platform.node(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import warp

        facts["warp"] = warp.__version__
    except ImportError:  # pragma: no cover
        pass
    from gbxcule import __version__

    facts["gbxcule"] = __version__
    facts["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        root = Path(__file__).resolve().parents[3]
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        facts["git"] = rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if rev.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        facts["git"] = None
    return facts


def check_run_dir(run_dir: str | Path, resume: bool, inputs=()) -> None:
    """Refuse a run folder that cannot take the run (changing nothing): a resumed one must hold a checkpoint, a
    fresh one must not (it would bury a run that can be resumed); neither may be one of the run's `inputs` (its
    ROM, pack, start states, goal template) or inside another run's folder (the output guard)."""
    d = Path(run_dir)
    check_output_dir(d, inputs)
    if resume:
        if not d.is_dir():
            raise CheckpointError(f"--resume: run folder {d} does not exist")
        if not (d / CHECKPOINT_NAME).is_file():
            raise CheckpointError(f"--resume: {d} has no {CHECKPOINT_NAME}")
    elif (d / CHECKPOINT_NAME).exists():
        raise CheckpointError(f"run folder {d} already holds a checkpoint: resume it with --resume or choose "
                              f"another --run-dir")
    elif d.exists() and not d.is_dir():
        raise GbxculeError(f"run folder {d} is a file")


def by_level_scalars(metrics: dict) -> dict:
    """TensorBoard's scalars of the per-level lists (`X_by_level` beside `samples_by_level`): `X/level_J` for each
    level J that had samples in the update (a level with none has no point, not a 0)."""
    counts = metrics.get("samples_by_level")
    if not isinstance(counts, list):
        return {}
    return {f"{k[:-len('_by_level')]}/level_{j}": x for k, v in metrics.items()
            if k.endswith("_by_level") and k != "samples_by_level" and isinstance(v, list) and len(v) == len(counts)
            for j, (x, c) in enumerate(zip(v, counts, strict=True)) if c}


class Run:
    """A run folder (see the module docstring).

    A folder holding a checkpoint is refused unless resumed, and the files of a run killed before its first
    checkpoint are moved aside into `previous-N/` (`moved` says where). Stale temporary files of a killed write
    are removed when the folder is opened. TensorBoard is written from this thread (no writer thread of its own):
    a full disk or a read-only folder is one error line, never a traceback from another thread."""

    def __init__(self, run_dir: str | Path, config: dict, resume: bool = False, tensorboard: bool = True):
        self.dir = Path(run_dir)
        self.moved: Path | None = None
        check_run_dir(self.dir, resume)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GbxculeError(f"cannot create run folder {self.dir}: {exc.strerror or exc}") from None
        self.remove_stale_temps()
        if not resume:
            self.moved = self._move_old_files()
        self.config = config
        if not resume:
            write_output(self.dir / "config.json", dumps(config) + "\n")
            write_output(self.dir / "facts.json", dumps(run_facts()) + "\n")
        self._tb = TensorBoard.open(self.dir / "tb") if tensorboard else None

    def remove_stale_temps(self) -> list[Path]:
        """Delete the temporary files (`.NAME.*`) a write killed before its rename left behind."""
        gone = []
        for p in self.dir.iterdir():
            if p.is_file() and any(p.name.startswith(f".{n}.") for n in RUN_FILES):
                p.unlink(missing_ok=True)
                gone.append(p)
        return gone

    def _move_old_files(self) -> Path | None:
        old = [self.dir / n for n in RUN_FILES if (self.dir / n).exists()]
        if not old:
            return None
        k = 1
        while (self.dir / f"previous-{k}").exists():
            k += 1
        dest = self.dir / f"previous-{k}"
        dest.mkdir()
        for p in old:
            p.rename(dest / p.name)
        return dest

    def log(self, update: int, metrics: dict) -> None:
        """Append one line to metrics.jsonl (and scalars to TensorBoard)."""
        line = dumps({"update": update, **metrics}, indent=None) + "\n"
        try:
            with open(self.dir / "metrics.jsonl", "a") as f:
                f.write(line)
        except OSError as exc:
            raise GbxculeError(f"cannot write {self.dir / 'metrics.jsonl'}: {exc.strerror or exc}") from None
        if self._tb is not None:
            step = int(metrics.get("env_steps", update))
            self._tb.scalars({k: v for k, v in {**metrics, **by_level_scalars(metrics)}.items()
                              if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}, step)

    def truncate_log(self, update: int, warn=None) -> None:
        """On resume: drop log lines of updates after the checkpoint (a killed run wrote them), and a torn last
        line (a kill during the write), with a warning naming the file."""
        path = self.dir / "metrics.jsonl"
        if not path.is_file():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        keep = []
        for i, ln in enumerate(lines):
            try:
                row = json.loads(ln)
            except json.JSONDecodeError:
                if i != len(lines) - 1:
                    raise CheckpointError(f"{path}: line {i + 1} is not JSON (not a torn last line: the log is "
                                          f"damaged; move it aside to resume)") from None
                if warn:
                    warn(f"{path}: dropped a torn last line (a kill during a write)")
                continue
            if row.get("update", 0) <= update:
                keep.append(ln)
        write_output(path, "\n".join(keep) + "\n" if keep else "")

    def save_checkpoint(self, state: dict, policy: dict | None) -> Path:
        """Write policy.pt (None: not yet, the run has not learned), then checkpoint.pt, each atomically, both
        serialised before either is written (a failure to serialise changes neither): a kill leaves both of the
        last save, or the new policy beside the previous checkpoint (resume writes policy.pt again from the
        checkpoint)."""
        policy_bytes, state_bytes = None if policy is None else torch_bytes(policy), torch_bytes(state)
        if policy_bytes is not None:
            write_output(self.dir / POLICY_NAME, policy_bytes)
        return write_output(self.dir / CHECKPOINT_NAME, state_bytes)

    def policy_ahead(self, global_step: int) -> bool:
        """Whether policy.pt is missing, unreadable or of weights later than `global_step` (a kill between a save's
        two writes left it one save ahead of checkpoint.pt): the only case a resume rewrites it before its own
        first save. A policy.pt of the checkpoint's weights, or of a best eval's earlier ones, is left as it is (a
        resume that fails changes no file)."""
        try:
            return load_checkpoint(self.dir / POLICY_NAME).get("global_step", -1) > global_step
        except CheckpointError:
            return True

    def write_torch(self, name: str, state: dict) -> Path:
        return write_output(self.dir / name, torch_bytes(state))

    def images(self, step: int, images: dict) -> None:
        """RGB images (uint8 [H, W, 3]) to TensorBoard under their names."""
        if self._tb is not None:
            self._tb.images(images, step)

    def write_json(self, name: str, payload: dict) -> Path:
        return write_output(self.dir / name, dumps(payload) + "\n")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def final_policy(path: str | Path) -> Path:
    """What evaluating `path` means: a run folder's policy.pt (the run's final policy: its last weights, or the best
    periodic eval's where the last did worse) where it has one, else the path itself."""
    p = Path(path)
    return p / POLICY_NAME if p.is_dir() and (p / POLICY_NAME).is_file() else p


def torch_bytes(state: dict) -> bytes:
    """A checkpoint dict serialised (torch.save, with the format tag)."""
    import torch

    buf = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, **state}, buf)
    return buf.getvalue()


class TensorBoard:
    """TensorBoard events written by this thread: one event file, each update's scalars (and images) appended
    and flushed at once (tensorboard's own writer would write from a thread of its own, whose errors on a full disk
    end up as tracebacks mixed into the run's error line)."""

    def __init__(self, folder: Path):
        from torch.utils.tensorboard.summary import image, scalar

        self._scalar, self._image = scalar, image
        self.folder = folder
        self.path = folder / f"events.out.tfevents.{time.time():.0f}.{platform.node()}.gbxcule"
        self._f = None

    @classmethod
    def open(cls, folder: Path) -> TensorBoard | None:
        """A writer into `folder`, or None where tensorboard is not installed."""
        try:
            import tensorboard.summary.writer.record_writer  # noqa: F401
            import torch.utils.tensorboard.summary  # noqa: F401
        except ImportError:
            return None
        return cls(folder)

    def _write(self, summaries: list, step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        try:
            if self._f is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._f = open(self.path, "ab")  # noqa: SIM115 - held open across updates, closed by close()
                self._rec = RecordWriter(self._f)
                self._rec.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
            value = [v for s in summaries for v in s.value]
            self._rec.write(Event(wall_time=time.time(), step=step, summary=Summary(value=value)).SerializeToString())
            self._f.flush()
        except OSError as exc:
            raise GbxculeError(f"cannot write TensorBoard events in {self.folder}: {exc.strerror or exc}") from None

    def scalars(self, values: dict, step: int) -> None:
        if values:
            self._write([self._scalar(k, v) for k, v in values.items()], step)

    def images(self, images: dict, step: int) -> None:
        if images:
            self._write([self._image(k, img, dataformats="HWC") for k, img in images.items()], step)

    def close(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()
            self._f = None


def view_before(ck: dict) -> None:
    """A checkpoint written before the models saw the whole frame (a CNN's description without a `view`): its
    description and its config's algorithm section (the one naming the model) name the torso it was trained with
    (rl/models.py VIEWS)."""
    from gbxcule.rl.models import VIEW_BEFORE

    desc = ck.get("model_desc")
    if not isinstance(desc, dict) or "arch" not in desc or "view" in desc:
        return
    desc["view"] = VIEW_BEFORE
    for section in ck["config"].values():
        if isinstance(section, dict) and "model" in section:
            section.setdefault("view", VIEW_BEFORE)


def load_checkpoint(path: str | Path, need_training: bool = False) -> dict:
    """A checkpoint file (or a run folder's checkpoint.pt, else its policy.pt), checked to be whole; with
    `need_training` it must be a full checkpoint (optimizer, counters), not a policy file."""
    import pickle
    import zipfile

    import torch

    p = Path(path)
    if p.is_dir():
        p = p / (CHECKPOINT_NAME if (p / CHECKPOINT_NAME).is_file() or need_training else POLICY_NAME)
    if not p.is_file():
        raise CheckpointError(f"no checkpoint at {p}")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError,
            AttributeError, ModuleNotFoundError, TypeError, KeyError, ImportError, IndexError,
            UnicodeDecodeError, MemoryError) as exc:
        raise CheckpointError(f"{p} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT or "model" not in ck:
        raise CheckpointError(f"{p} is not a gbxcule checkpoint of format {CHECKPOINT_FORMAT}")
    if not isinstance(ck.get("config"), dict):
        raise CheckpointError(f"{p} holds no config")
    view_before(ck)
    if need_training and not all(k in ck for k in ("optimizer", "update", "global_step", "rng", "env")):
        raise CheckpointError(f"{p} is a policy file (weights only), not a training checkpoint: it cannot be "
                              f"resumed")
    return ck
