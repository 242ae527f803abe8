"""Action codecs: how an agent's integer action becomes Game Boy buttons.

A codec is versioned and immutable: once published, its name, version, kernel id and action order never
change (a policy trained with it depends on that order). Add a new version instead of editing one.

Joypad masks use 1 = pressed, bit layout as in the low nibble of JOYP (0xFF00):
  dpad_mask:   bit0 RIGHT, bit1 LEFT, bit2 UP, bit3 DOWN
  button_mask: bit0 A,     bit1 B,    bit2 SELECT, bit3 START
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Button name -> (which mask: 0 dpad / 1 buttons, bit). Names are PyBoy's button names.
BUTTONS: dict[str, tuple[int, int]] = {
    "right": (0, 0), "left": (0, 1), "up": (0, 2), "down": (0, 3),
    "a": (1, 0), "b": (1, 1), "select": (1, 2), "start": (1, 3),
}


@dataclass(frozen=True)
class ActionCodec:
    """One versioned mapping from action index to a set of held buttons."""

    name: str
    version: int
    kernel_id: int
    actions: tuple[tuple[str, ...], ...]  # per action, the PyBoy names of the buttons it holds
    _masks: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        masks = np.zeros((len(self.actions), 2), dtype=np.int32)
        for i, names in enumerate(self.actions):
            for n in names:
                which, bit = BUTTONS[n]
                masks[i, which] |= 1 << bit
        masks.setflags(write=False)
        object.__setattr__(self, "_masks", masks)

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    @property
    def names(self) -> tuple[str, ...]:
        """Each action's name, as the codecs below are written: its buttons joined by "+", or "noop"."""
        return tuple("+".join(b) if b else "noop" for b in self.actions)

    @property
    def mask_table(self) -> np.ndarray:
        """int32 [num_actions, 2]: (dpad_mask, button_mask) per action, for kernels."""
        return self._masks

    def check(self, action: int) -> int:
        a = int(action)
        if not 0 <= a < self.num_actions or a != action:
            raise ValueError(f"action {action!r} is out of range for codec {self.name} "
                             f"(v{self.version}): valid actions are 0..{self.num_actions - 1}")
        return a

    def check_array(self, actions: np.ndarray) -> np.ndarray:
        """Validate a vector of actions at once; returns it as int32."""
        arr = np.asarray(actions)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"actions for codec {self.name} (v{self.version}) must be integers, "
                             f"got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_actions):
            bad = arr[(arr < 0) | (arr >= self.num_actions)][0]
            self.check(int(bad))
        return arr.astype(np.int32, copy=False)

    def to_joypad_mask(self, action: int) -> tuple[int, int]:
        """(dpad_mask, button_mask) with 1 = pressed."""
        m = self._masks[self.check(action)]
        return int(m[0]), int(m[1])

    def pyboy_buttons(self, action: int) -> tuple[str, ...]:
        """PyBoy button names to press (and later release) for this action."""
        return self.actions[self.check(action)]

    def describe(self) -> dict:
        """What an artifact records about the codec."""
        return {"name": self.name, "version": self.version, "kernel_id": self.kernel_id,
                "num_actions": self.num_actions}


def _single(*names: str) -> tuple[tuple[str, ...], ...]:
    return tuple(() if n == "noop" else (n,) for n in names)


CODECS: dict[str, ActionCodec] = {
    c.name: c
    for c in (
        ActionCodec("pokemonred_puffer_v0", 0, 0, _single("a", "b", "start", "up", "down", "left", "right")),
        ActionCodec("pokemonred_puffer_v1", 1, 1,
                    _single("noop", "a", "b", "start", "up", "down", "left", "right")),
        # The order of the upstream Pokemon RL projects (PokemonRedExperiments, pokemonred_puffer envs).
        ActionCodec("pokemonred_upstream_v0", 0, 2, _single("down", "left", "right", "up", "a", "b", "start")),
        # Every single button, SELECT included, plus NOOP: for games and test ROMs in general.
        ActionCodec("dmg_buttons_v0", 0, 3,
                    _single("noop", "a", "b", "select", "start", "right", "left", "up", "down")),
    )
}
DEFAULT_CODEC = "pokemonred_puffer_v1"


def get_codec(name: str) -> ActionCodec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown action codec {name!r}; known codecs: {', '.join(CODECS)}") from None
