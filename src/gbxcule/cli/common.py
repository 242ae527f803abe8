"""Arguments several commands share: backend, envs, codec, schedule, action generator."""

from __future__ import annotations

from gbxcule.backends import BACKENDS
from gbxcule.core.action_codec import CODECS, DEFAULT_CODEC
from gbxcule.core.schedule import ActionSchedule
from gbxcule.harness.actions import ACTION_GENERATORS


def add_run_args(p, backend: str = "pyboy_single", steps: int | None = 100, actions: tuple[str, ...] = (),
                 codec: str | None = DEFAULT_CODEC) -> None:
    """`actions`: action sources beside the generators (e.g. "solution"); `steps` or `codec` None: the command
    picks the default (from a task)."""
    p.add_argument("--backend", default=backend, choices=BACKENDS, help=f"emulator backend (default {backend})")
    p.add_argument("--envs", type=int, default=1, help="number of envs (default 1)")
    p.add_argument("--steps", type=int, default=steps, help=f"steps to run (default {steps or 100})")
    p.add_argument("--frames-per-step", type=int, default=24, help="frames per step (default 24)")
    p.add_argument("--release-after-frames", type=int, default=8,
                   help="frames the action's buttons are held in each step (default 8)")
    p.add_argument("--codec", default=codec, choices=list(CODECS), help=f"action codec ({DEFAULT_CODEC})")
    p.add_argument("--actions", default="seeded_random", choices=(*ACTION_GENERATORS, *actions),
                   help="action generator")
    p.add_argument("--seed", type=int, default=0, help="seed of the action generator (default 0)")
    p.add_argument("--fixed-action", type=int, default=0, help="the action for --actions fixed (default 0)")


def add_state_arg(p) -> None:
    p.add_argument("--state", metavar="FILE",
                   help="start every env from this save state: a PyBoy .state or a gbxcule snapshot")


def schedule_from(args) -> ActionSchedule:
    from gbxcule.cli.checks import schedule

    return schedule(args.frames_per_step, args.release_after_frames)


def parse_start_states(spec: str | None):
    """`--start-states` (train, goal calibrate): a state file or folder, GENERATOR:K[:MAX_LEN] (tasks.START_GENERATORS:
    random_noops, random_actions, solution) or power_on, as the env's `start_states` takes it."""
    from gbxcule.core.errors import GbxculeError
    from gbxcule.rl.tasks import START_GENERATORS

    if spec is None or spec == "power_on":
        return spec
    if spec.split(":")[0] in START_GENERATORS:
        name, *parts = spec.split(":")
        try:
            return [name, *(int(x) for x in parts)] if parts else [name, 32]
        except ValueError:
            raise GbxculeError(f"--start-states {spec!r}: use {name}:K[:MAX_LEN]") from None
    return spec
