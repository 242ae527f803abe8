"""QUEST: a long quest built on OVERWORLD's engine, the second built-in game (docs/quest.md)."""

from gbxcule.roms.quest.game import ADDR, QUEST, STATE

__all__ = ["ADDR", "QUEST", "STATE"]
