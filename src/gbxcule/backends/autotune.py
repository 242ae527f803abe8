"""Choosing a speed knob by timing it on the device while the envs run (`sort_parts="auto"`).

How many times a frame the envs should be re-sorted depends on the game and on how far its envs have spread:
envs that part ways within a frame (Geometrix, Shock Lobster) run up to a fifth faster when regrouped four
times a frame, while a game whose envs stay together loses the same to the extra launches (BENCHMARKS.md,
"Re-sorting within frames"). Results do not depend on the choice, so it can follow the measured speed.

`Tuner` is the policy alone, without the device: a trial runs each candidate for one step, timed, and the
fastest is kept until the next trial. The first trial starts at step 1 (step 0 may load kernels, which would
count against the first candidate), and trials come again after 8 steps, then 16, 32, ...
up to every `max_gap` steps, since the best choice moves as random play spreads the envs. The step after a
trial reads its times (`poll`), which waits once for the device to finish the trial's last step: one wait
every 8-256 steps, none in between."""

from __future__ import annotations

from collections.abc import Callable, Sequence

AUTO_CANDIDATES = (1, 2, 4, 8)


class Tuner:
    """Trial-and-keep choice among `candidates` (the first is used before any trial has finished)."""

    def __init__(self, candidates: Sequence[int] = AUTO_CANDIDATES, first_gap: int = 8, max_gap: int = 256):
        if not candidates or first_gap < 1 or max_gap < first_gap:
            raise ValueError("Tuner needs candidates and 1 <= first_gap <= max_gap")
        self.candidates = tuple(candidates)
        self.best = self.candidates[0]
        self.step = 0  # steps planned so far
        self.next_trial = 1  # the earliest step the next trial may start at
        self.gap = first_gap
        self.max_gap = max_gap
        self._trial_at: int | None = None  # the step the trial being planned started at
        self.pending: list[tuple[int, object]] = []  # (candidate, handle) of the trial not read yet
        self.history: list[dict[int, float]] = []  # the last 64 trials' times, in milliseconds

    def plan(self) -> tuple[int, bool]:
        """The value for the next step, and whether that step is timed (a trial step); advances the count."""
        step = self.step
        self.step += 1
        if self._trial_at is None and not self.pending and step >= self.next_trial:
            self._trial_at = step
        if self._trial_at is not None:
            k = step - self._trial_at
            if k == len(self.candidates) - 1:
                self._trial_at = None  # the trial's last step: the next step may read it
            if len(self.history) % 2:
                k = len(self.candidates) - 1 - k  # every other trial backwards: play that drifts favours none
            return self.candidates[k], True
        return self.best, False

    def timed(self, value: int, handle: object) -> None:
        """Record the handle of a trial step's timing (read later by `poll`)."""
        self.pending.append((value, handle))

    def poll(self, elapsed: Callable[[object], float]) -> None:
        """Once a trial's steps have all been timed, read them (`elapsed`: a handle's milliseconds), keep the
        fastest and schedule the next trial."""
        if self._trial_at is not None or len(self.pending) < len(self.candidates):
            return
        times = {value: elapsed(handle) for value, handle in self.pending}
        self.pending = []
        self.history = [*self.history[-63:], times]
        self.best = min(self.candidates, key=lambda v: (times[v], self.candidates.index(v)))
        self.next_trial = self.step + self.gap
        self.gap = min(2 * self.gap, self.max_gap)
