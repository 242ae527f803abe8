"""Choosing a speed knob by timing it on the device while the envs run (`sort_parts="auto"`).

How many times a frame the envs should be re-sorted depends on the game and on how far its envs have spread:
envs that part ways within a frame (Geometrix, Shock Lobster) run up to a fifth faster when regrouped four
times a frame, while a game whose envs stay together loses the same to the extra launches (BENCHMARKS.md,
"Re-sorting within frames"). Results do not depend on the choice, so it can follow the measured speed.

`Tuner` is the policy alone, without the device. A trial pits the value in use against a neighbour (the next
candidate up or down) over four steps in the order A B B A, each timed: play that speeds up or slows down
steadily (random play spreads the envs apart, step after step) adds the same to both sums, so it favours
neither. The neighbour that wins is kept, and the climb goes on at once in the same direction; when both
neighbours lose (or there is none), the value stays, and the next trial comes 8 steps later, then 16, 32, ...
up to every `max_gap` steps, since the best value moves as play goes on. The first trial starts at step 1
(step 0 may load kernels). The step after a trial reads its times (`poll`), which waits once for the device
to finish the trial's last step: no waits between trials."""

from __future__ import annotations

from collections.abc import Callable, Sequence

AUTO_CANDIDATES = (1, 2, 4, 8)


class Tuner:
    """Hill-climbing choice among `candidates` by A B B A trials (module docstring); starts at the first."""

    TRIAL = (0, 1, 1, 0)  # the trial's steps: 0 the value in use, 1 the challenger

    def __init__(self, candidates: Sequence[int] = AUTO_CANDIDATES, first_gap: int = 8, max_gap: int = 256):
        if len(candidates) < 2 or first_gap < 1 or max_gap < first_gap:
            raise ValueError("Tuner needs two candidates or more and 1 <= first_gap <= max_gap")
        self.candidates = tuple(candidates)
        self.best = self.candidates[0]
        self.step = 0  # steps planned so far
        self.next_trial = 1  # the earliest step the next trial may start at
        self.gap = first_gap
        self.first_gap = first_gap
        self.max_gap = max_gap
        self.up = True  # the direction of the next challenger
        self.tried_other = False  # the other direction lost already at this value
        self._trial: tuple[int, int] | None = None  # (start step, challenger) of the trial being planned
        self.pending: list[tuple[int, object]] = []  # (value, handle) of the trial's steps, not read yet
        self.history: list[dict[int, float]] = []  # the last 64 trials: ms per step by value (the two summed)

    def _challenger(self) -> int | None:
        i = self.candidates.index(self.best) + (1 if self.up else -1)
        return self.candidates[i] if 0 <= i < len(self.candidates) else None

    def plan(self) -> tuple[int, bool]:
        """The value for the next step, and whether that step is timed (a trial step); advances the count."""
        step = self.step
        self.step += 1
        if self._trial is None and not self.pending and step >= self.next_trial:
            if self._challenger() is None:
                self.up = not self.up
            self._trial = (step, self._challenger())
        if self._trial is not None:
            start, challenger = self._trial
            k = step - start
            if k == len(self.TRIAL) - 1:
                self._trial = None  # the trial's last step: the next step may read it
            return (challenger if self.TRIAL[k] else self.best), True
        return self.best, False

    def timed(self, value: int, handle: object) -> None:
        """Record the handle of a trial step's timing (read later by `poll`)."""
        self.pending.append((value, handle))

    def poll(self, elapsed: Callable[[object], float]) -> None:
        """Once a trial's steps have all been timed, read them (`elapsed`: a handle's milliseconds), keep the
        faster value and schedule the next trial."""
        if self._trial is not None or len(self.pending) < len(self.TRIAL):
            return
        times: dict[int, float] = {}
        for value, handle in self.pending:
            times[value] = times.get(value, 0.0) + elapsed(handle)
        self.pending = []
        self.history = [*self.history[-63:], {v: t / 2 for v, t in times.items()}]
        challenger = next(v for v in times if v != self.best)
        if times[challenger] < times[self.best]:
            self.best = challenger  # climb on in this direction, at once
            self.tried_other = False
            self.next_trial = self.step
            return
        if not self.tried_other:
            self.up = not self.up  # try the other side, at once
            self.tried_other = True
            i = self.candidates.index(self.best) + (1 if self.up else -1)
            if 0 <= i < len(self.candidates):
                self.next_trial = self.step
                return
        self.tried_other = False  # neither neighbour wins: check again later
        self.next_trial = self.step + self.gap
        self.gap = min(2 * self.gap, self.max_gap)
