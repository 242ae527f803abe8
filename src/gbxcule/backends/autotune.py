"""Choosing a speed knob by timing it on the device while the envs run (`sort_parts="auto"`).

How many times a frame the envs should be re-sorted depends on the game and on how far its envs have spread:
envs that part ways within a frame (Geometrix, Shock Lobster) run up to a fifth faster when regrouped four
times a frame, while a game whose envs stay together loses the same to the extra launches (docs/divergence.md,
"What is built"). Results do not depend on the choice, so it can follow the measured speed.

The backend's candidates are (parts, heaviest first, flat loop) triples: with the `path` key, whether the envs
that ran the most since the last sort go first or last changes how long SMs sit idle at a launch's end, and the
better end depends on the game; so does whether the step kernel's lanes wait for their warp's slowest CPU batch
(the nested loop) or go on from batch to batch (the flat loop), and whether the envs run in two stream groups
(docs/divergence.md, "What is built").

`Tuner` is the policy alone, without the device. A trial times every candidate for two steps, in the order
1 2 4 4 2 1: play that speeds up or slows down steadily (random play spreads the envs apart, step after step)
adds the same to every candidate's sum, so it favours none. (Trying only a neighbour, climbing, does not do:
on Geometrix 2 parts run slower than 1 and 4 faster than both.) The fastest is kept until the next trial,
which comes 32 steps after this one is read, then 64, 128, ... up to every `max_gap` steps, since the best value
moves as play goes on. The first trial starts at step `first_trial` (12, so that the backend's eight choices,
16 steps, end before the game benchmark's timed steps 30-39): the first steps from a state are no guide, since
the envs have not spread apart yet (on Tobu Tobu Girl at 65,536 envs a step took 0.27 s at steps 1-6 and 1.8 s at
steps 39-44, and a trial at step 1 picked 2 parts where 1 ran fastest later; docs/divergence.md, "What did not
work"). The step after a trial reads its times (`poll`), which waits once for the device to finish the trial's
last step: no waits between trials."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

AUTO_CANDIDATES = (1, 2, 4)


class Tuner:
    """The fastest of `candidates` by palindromic trials (module docstring); the first before any trial."""

    def __init__(self, candidates: Sequence[Hashable] = AUTO_CANDIDATES, first_gap: int = 32, max_gap: int = 256,
                 first_trial: int = 12):
        if len(candidates) < 2 or first_gap < 1 or max_gap < first_gap or first_trial < 0:
            raise ValueError("Tuner needs two candidates or more, 1 <= first_gap <= max_gap and first_trial >= 0")
        self.candidates = tuple(candidates)
        self.trial = self.candidates + self.candidates[::-1]  # each candidate twice, drift cancelling
        self.best = self.candidates[0]
        self.step = 0  # steps planned so far
        self.next_trial = first_trial  # the earliest step the next trial may start at
        self.gap = first_gap
        self.max_gap = max_gap
        self._trial_at: int | None = None  # the step the trial being planned started at
        self.pending: list[tuple[Hashable, object]] = []  # (value, handle) of the trial's steps, not read yet
        self.history: list[dict[Hashable, float]] = []  # the last 64 trials: ms per step by value (mean of two)

    def plan(self) -> tuple[Hashable, bool]:
        """The value for the next step, and whether that step is timed (a trial step); advances the count."""
        step = self.step
        self.step += 1
        if self._trial_at is None and not self.pending and step >= self.next_trial:
            self._trial_at = step
        if self._trial_at is not None:
            k = step - self._trial_at
            if k == len(self.trial) - 1:
                self._trial_at = None  # the trial's last step: the next step may read it
            return self.trial[k], True
        return self.best, False

    def timed(self, value: Hashable, handle: object) -> None:
        """Record the handle of a trial step's timing (read later by `poll`)."""
        self.pending.append((value, handle))

    def poll(self, elapsed: Callable[[object], float]) -> None:
        """Once a trial's steps have all been timed, read them (`elapsed`: a handle's milliseconds), keep the
        fastest value and schedule the next trial."""
        if self._trial_at is not None or len(self.pending) < len(self.trial):
            return
        times: dict[Hashable, float] = {}
        for value, handle in self.pending:
            times[value] = times.get(value, 0.0) + elapsed(handle) / 2
        self.pending = []
        self.history = [*self.history[-63:], times]
        self.best = min(self.candidates, key=lambda v: (times[v], self.candidates.index(v)))
        self.next_trial = self.step + self.gap
        self.gap = min(2 * self.gap, self.max_gap)
