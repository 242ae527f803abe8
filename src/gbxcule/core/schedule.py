"""The action schedule: when within a step the chosen buttons are held.

A step is `frames_per_step` frames. The action's buttons are held during frames
`[0, release_after_frames)` of the step and released for the rest. Every backend derives its button
timing from `segments` (or `held_in_frame`, its per-frame form), so all of them agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionSchedule:
    frames_per_step: int = 24
    release_after_frames: int = 8

    def __post_init__(self) -> None:
        if self.frames_per_step < 1:
            raise ValueError(f"frames_per_step must be >= 1, got {self.frames_per_step}")
        if not 0 <= self.release_after_frames <= self.frames_per_step:
            raise ValueError(f"release_after_frames must be in [0, frames_per_step={self.frames_per_step}], "
                             f"got {self.release_after_frames}")

    def held_in_frame(self, frame: int) -> bool:
        """Whether the step's buttons are held during frame `frame` (0-based) of the step."""
        if not 0 <= frame < self.frames_per_step:
            raise ValueError(f"frame {frame} is outside a step of {self.frames_per_step} frames")
        return frame < self.release_after_frames

    def segments(self) -> tuple[tuple[int, bool], ...]:
        """The step as runs of (frames, held), empty runs left out."""
        runs = ((self.release_after_frames, True), (self.frames_per_step - self.release_after_frames, False))
        return tuple(r for r in runs if r[0] > 0)

    def describe(self) -> dict:
        return {"frames_per_step": self.frames_per_step, "release_after_frames": self.release_after_frames}
