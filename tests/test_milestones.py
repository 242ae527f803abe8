"""Milestones and dead ends in task packs: progress events rewarded once per episode, and the RAM state that
makes a task unwinnable (docs/rl_env.md)."""

from __future__ import annotations

import pytest

from gbxcule.rl.tasks import Milestone, TaskError, parse_pack

PACK = """
[pack]
name = "m"
rom = "OVERWORLD"
milestones = [{ name = "left_house", addr = 0xC104, mask = 0x01, value = 0x01 },
              { name = "route", addr = 0xC104, mask = 0x04, value = 0x04 }]
fail_ram = [{ addr = 0xC10A, value = 9 }]

[tasks.a]
goal_ram = [{ addr = 0xC104, mask = 0x08, value = 0x08 }]

[tasks.b]
goal_ram = [{ addr = 0xC100, value = 2 }]
milestones = [{ name = "lab", addr = 0xC104, mask = 0x02, value = 0x02, op = "eq" }]
fail_ram = []
"""


def test_pack_milestones_and_fail_conditions_apply_to_every_task_unless_the_task_names_its_own():
    tasks = parse_pack(PACK, "m.toml")
    a, b = tasks["a"], tasks["b"]
    assert [m.name for m in a.milestones] == ["left_house", "route"]
    assert isinstance(a.milestones[0], Milestone) and a.milestones[1].condition.mask == 0x04
    assert [(c.addr, c.value) for c in a.fail_ram] == [(0xC10A, 9)]
    assert [m.name for m in b.milestones] == ["lab"] and b.fail_ram == ()


@pytest.mark.parametrize("bad, needle", [
    ('milestones = [{ addr = 0xC104, value = 1 }]', "needs a name"),
    ('milestones = [{ name = "x", addr = 0xC104, value = 1 }, { name = "x", addr = 0xC104, value = 2 }]',
     "given twice"),
    ('milestones = [{ name = "x", addr = 0x8000, value = 1 }]', "not a WRAM"),
    ('milestones = { name = "x" }', "must be a list"),
    ('fail_ram = [{ addr = 0xC104 }]', "each fail_ram entry needs addr and value"),
    ('fail_ram = [{ addr = 0xC104, value = 1, bits = 3 }]', "unknown fail_ram key"),
])
def test_bad_milestones_and_fail_conditions_are_one_line(bad, needle):
    text = f'[pack]\nname = "m"\nrom = "OVERWORLD"\n{bad}\n[tasks.a]\ngoal_ram = [{{ addr = 0xC100, value = 1 }}]\n'
    with pytest.raises(TaskError, match=needle):
        parse_pack(text, "m.toml")
