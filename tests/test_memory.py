"""Issue 42: one memory model for every command that allocates envs, checked against the real limit (cgroup v2 and
v1 files, MemAvailable, free GPU memory) before anything is allocated, with one line and the largest count."""

import pytest

from gbxcule.cli.main import main
from gbxcule.core import memory
from gbxcule.core.errors import GbxculeError
from gbxcule.core.memory import Available, MemoryLimitError, Need


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cgroup_v2_limit_over_the_cgroup_and_its_parents(tmp_path):
    root = tmp_path / "cg"
    proc = write(tmp_path / "proc_cgroup", "0::/app/job\n")
    write(root / "app/job/memory.max", "max\n")  # no limit of its own
    write(root / "app/job/memory.current", "1000\n")
    write(root / "app/memory.max", str(4 << 30) + "\n")  # the parent's 4 GiB binds
    write(root / "app/memory.current", str(1 << 30) + "\n")
    write(root / "app/memory.stat", "anon 1\ninactive_file " + str(256 << 20) + "\n")
    got = memory.cgroup_available(proc, root)
    assert got.bytes == (4 << 30) - (1 << 30) + (256 << 20)  # reclaimable page cache is not counted as used
    assert "memory.max" in got.source and "4.00 GiB" in got.source


def test_cgroup_v1_limit_and_no_limit(tmp_path):
    root = tmp_path / "cg"
    proc = write(tmp_path / "proc_cgroup", "9:cpu:/\n4:memory,hugetlb:/box/1\n")
    write(root / "memory/box/1/memory.limit_in_bytes", str(2 << 30))
    write(root / "memory/box/1/memory.usage_in_bytes", str(512 << 20))
    write(root / "memory/box/memory.limit_in_bytes", "9223372036854771712")  # "unlimited"
    write(root / "memory/memory.limit_in_bytes", "9223372036854771712")
    got = memory.cgroup_available(proc, root)
    assert got.bytes == (2 << 30) - (512 << 20) and "limit_in_bytes" in got.source
    write(root / "memory/box/1/memory.limit_in_bytes", "9223372036854771712")
    assert memory.cgroup_available(proc, root) is None
    # a cgroup namespace: the process's path is not under the mount, whose root is its own cgroup
    proc2 = write(tmp_path / "proc_cgroup2", "0::/elsewhere\n")
    write(root / "memory.max", str(3 << 30))
    write(root / "memory.current", "0")
    assert memory.cgroup_available(proc2, root).bytes == 3 << 30


def test_host_available_takes_the_smaller_of_meminfo_and_the_cgroup(tmp_path):
    root = tmp_path / "cg"
    proc = write(tmp_path / "proc_cgroup", "0::/\n")
    meminfo = write(tmp_path / "meminfo", "MemTotal: 100 kB\nMemAvailable:   22522376 kB\n")
    assert memory.host_available(meminfo, proc, root) == Available(22522376 * 1024, "MemAvailable")
    write(root / "memory.max", str(4 << 30))
    write(root / "memory.current", "0")
    assert memory.host_available(meminfo, proc, root).bytes == 4 << 30


def test_check_says_the_numbers_and_the_largest_count_that_fits():
    need = Need.device("emulators", 1000, 50) + Need.device("trainer storage", 3000) + Need.host("actions", 4)
    host = Available(10**9, "test")
    memory.check(100, need.on("cpu"), host)  # fits
    with pytest.raises(MemoryLimitError) as e:
        memory.check(1_000_000, need.on("cpu"), Available(400_050, "cgroup limit x"))
    msg = str(e.value)
    assert "\n" not in msg and "1,000,000 envs need" in msg and "host memory" in msg and "cgroup limit x" in msg
    assert "at most 99 envs fit" in msg  # (400,050 - 50) // 4,004
    with pytest.raises(MemoryLimitError, match="of device memory") as e:
        memory.check(1000, need.on("cuda"), host, Available(2_000_000, "free on cuda"))
    assert "at most 499 envs fit" in str(e.value)  # (2,000,000 - 50) // 4,000
    memory.check(10**9, need, None, None)  # an unknown limit is not checked


def test_the_model_covers_what_an_env_really_allocates():
    """GameEnv's need from the model against the bytes of every array it and its backend hold (within 5%)."""
    torch = pytest.importorskip("torch")
    import warp as wp

    from gbxcule.backends import emulator_need
    from gbxcule.rl.env import GameEnv

    seen = {}

    def add(obj):
        if isinstance(obj, torch.Tensor):
            seen[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
        elif isinstance(obj, wp.array) and obj.ptr:
            seen.setdefault(obj.ptr, obj.capacity)

    env = GameEnv(None, 8, "cpu", task="leave_house", stack_k=4, keep_final_obs=True,
                  reward={"novelty_pixels": 0.01})
    try:
        for holder in (env, env.backend, env.backend._store, env._nov_px):  # noqa: SLF001 (what a store holds)
            for v in vars(holder).values():
                add(v)
        actual = sum(seen.values())
        need = (emulator_need("warp_vec_cpu", env.rom, True, "pixels", False, 8)
                + Need.device("env", memory.env_bytes("pixels", 4, True, 1, 4096),
                              memory.slot_bytes(env.num_slots, env.backend.layout.total, "pixels"))).on("cpu")
        model = need.host_fixed + 8 * need.host_per_env
        assert actual <= model <= 1.05 * actual + (1 << 20), (actual, model)
    finally:
        env.close()


def test_huge_env_counts_are_refused_before_anything_is_allocated(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import gbxcule.backends.warp_vec as warp_vec

    def never(*a, **k):
        raise AssertionError("envs were allocated")

    monkeypatch.setattr(warp_vec.WarpVecBackend, "__init__", never)
    # a 4 GiB cgroup: the real limit, not the machine's free memory
    monkeypatch.setattr(memory, "host_available", lambda: Available(4 << 30, "cgroup limit 4.00 GiB in test"))
    run = tmp_path / "run"
    assert main(["train", "--device", "cpu", "--num-envs", "350000", "--total-steps", "1000000000",
                 "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "350,000 envs need" in err and "cgroup limit" in err and "trainer storage" in err
    most = int(err.split("at most ")[1].split()[0].replace(",", ""))
    assert 1000 < most < 350_000
    assert not run.exists()  # no run folder either
    assert main(["play", "OVERWORLD", "--backend", "warp_vec_cpu", "--envs", "350000", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "350,000 envs need" in err and "at most" in err
    # the adapters and eval go through GameEnv's check
    from gbxcule.rl.adapters.gym import GbxculeVectorEnv

    with pytest.raises(GbxculeError, match="350,000 envs need"):
        GbxculeVectorEnv(num_envs=350000, task="leave_house")


def test_a_state_archive_too_large_is_refused_before_the_emulators_exist(monkeypatch):
    pytest.importorskip("torch")
    import gbxcule.backends.warp_vec as warp_vec
    from gbxcule.rl.env import GameEnv

    def never(*a, **k):
        raise AssertionError("envs were allocated")

    monkeypatch.setattr(warp_vec.WarpVecBackend, "__init__", never)
    monkeypatch.setattr(memory, "host_available", lambda: Available(4 << 30, "cgroup limit 4.00 GiB in test"))
    with pytest.raises(GbxculeError, match="lower env.archive.capacity") as err:
        GameEnv(None, 8, "cpu", task="leave_house", archive={"capacity": 1_000_000})
    assert "\n" not in str(err.value) and "state archive's 1,000,000 cells" in str(err.value)
    # an archive that fits alone but not beside the envs: the env's whole need, the archive named in it
    from gbxcule.core.cartridge import cart_config
    from gbxcule.core.schema import ram_layout
    from gbxcule.rl.archive import CELL_RECORD_BYTES
    from gbxcule.rl.starts import task_rom
    from gbxcule.rl.tasks import load_task

    ram = ram_layout(cart_config(task_rom(load_task("leave_house"), None)).ram_banks * 0x2000).total
    fits_alone = (4 << 30) // (memory.slot_bytes(1, ram, "pixels") + CELL_RECORD_BYTES)
    with pytest.raises(GbxculeError, match=r"8 envs need .*\(state archive 4\.00 GiB\)") as err:
        GameEnv(None, 8, "cpu", task="leave_house", archive={"capacity": fits_alone})
    assert "\n" not in str(err.value)


def test_a_fixed_part_too_large_alone_is_said_so():
    need = memory.Need.device("buffers", 1 << 20) + memory.Need.device("table", 0, 8 << 30)
    with pytest.raises(GbxculeError, match=r"table 8\.00 GiB.*does not fit alone"):
        memory.check(10, need, None, Available(4 << 30, "a test's card"))


def tensor_peak(fn, *args) -> int:
    """The most bytes of tensors that `fn(*args)` made were alive at once, counted by torch's dispatcher: each op's new
    storages (not its inputs' or their views), dropped once freed."""
    torch = pytest.importorskip("torch")
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def storages(tree):
        return [t.untyped_storage() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live, self.peak = {}, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            given = {StorageWeakRef(s).cdata for s in storages((args, kwargs))}
            self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
            for s in storages(out):
                ref = StorageWeakRef(s)
                if ref.cdata not in given:
                    self.live.setdefault(ref.cdata, (ref, s.nbytes()))
            self.peak = max(self.peak, sum(n for _, n in self.live.values()))
            return out

    with Count() as count:
        fn(*args)
    return count.peak


@pytest.mark.parametrize("kind,arch,k,packed", [("ac", "nature", 1, False), ("ac", "small", 4, True),
                                                ("q_ln", "nature", 2, False), ("gru", "small", 1, True),
                                                ("gru_skip", "nature", 1, False), ("ac_cropped", "nature", 1, False),
                                                ("ac_row", "nature", 2, False), ("gru_row", "small", 1, True)])
def test_activation_bytes_covers_what_a_forward_and_backward_keeps(kind, arch, k, packed):
    """`activation_bytes` against torch's own count of a model's tensors per sample (the slope between two batch
    sizes: weights and their gradients drop out), float32 within 15% above it, bf16 autocast below it."""
    torch = pytest.importorskip("torch")
    from gbxcule.rl.models import ActorCritic, QNetwork, activation_bytes

    torch.manual_seed(0)
    gru, skip = (64 if kind.startswith("gru") else None), kind == "gru_skip"
    view, row = ("cropped" if kind.endswith("cropped") else "full"), kind.endswith("_row")
    model = (QNetwork(8, k, packed, arch, layer_norm=True) if kind == "q_ln"
             else ActorCritic(8, k, packed, arch, gru=gru, gru_skip=skip, view=view, milestone_row=row))
    state = torch.zeros(192, gru) if gru else None

    def step(obs, train, amp):
        ids = torch.arange(obs.shape[0])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp), torch.set_grad_enabled(train):
            x = obs[ids] if train else obs  # a minibatch gathered from storage; acting reads the env's buffer
            out = model.forward_step(x, state[:len(ids)])[:2] if gru else model(x)
        if train:
            out = out if isinstance(out, tuple) else (out,)
            sum(o.float().logsumexp(-1).mean() if o.dim() > 1 else o.float().mean() for o in out).backward()
            model.zero_grad(set_to_none=True)

    for train in (True, False):
        for amp in (False, True):
            peaks = []
            for b in (64, 192):
                obs = torch.randint(0, 256 if packed else 4, (b, k, 72, 20 if packed else 80), dtype=torch.uint8)
                peaks.append(tensor_peak(step, obs, train, amp))
            per_sample = (peaks[1] - peaks[0]) / 128
            est = activation_bytes(arch, k, packed, train, layer_norm=kind == "q_ln", gru=gru, gru_skip=skip, view=view)
            assert per_sample <= est, (train, amp, per_sample, est)
            if not amp:
                assert est <= 1.15 * per_sample, (train, per_sample, est)


def test_the_learners_working_memory_is_counted_before_anything_is_allocated(tmp_path, capsys, monkeypatch):
    """A PPO minibatch whose forward and backward does not fit is refused with the env's own check (one line,
    "learner working memory" named); more minibatches of the same run fit it."""
    pytest.importorskip("torch")
    import gbxcule.backends.warp_vec as warp_vec
    from gbxcule.rl.algos import get
    from gbxcule.rl.models import activation_bytes
    from gbxcule.rl.training import make_config

    def never(*a, **k):
        raise AssertionError("envs were allocated")

    monkeypatch.setattr(warp_vec.WarpVecBackend, "__init__", never)
    monkeypatch.setattr(memory, "host_available", lambda: Available(400 << 20, "cgroup limit in test"))
    cfg = make_config(None, {"env": {"num_envs": 256}, "ppo": {"minibatches": 1}})
    per_env, fixed = get("ppo").working_bytes(cfg)
    assert fixed == 0 and per_env == 32 * activation_bytes("nature", 1, False, True)  # 8,192 samples a minibatch
    args = ["train", "--device", "cpu", "--num-envs", "256", "--run-dir", str(tmp_path / "run"), "--set"]
    assert main([*args, "ppo.minibatches=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "256 envs need" in err and "learner working memory 1.17 GiB" in err
    assert not (tmp_path / "run").exists()
    with pytest.raises(AssertionError, match="envs were allocated"):  # past the check: the emulators are built
        main([*args, "ppo.minibatches=64"])


def test_an_out_of_memory_error_outside_training_is_one_line(tmp_path, capsys, monkeypatch):
    """torch's out-of-memory error in any command (here eval) is one line with what was asked, never a traceback."""
    torch = pytest.importorskip("torch")
    from gbxcule.rl import training

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity "
                                     "of 79.10 GiB of which 20.00 MiB is free. Including non-PyTorch memory, ...")

    monkeypatch.setattr(training, "evaluate", oom)
    assert main(["eval", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("gbxcule eval: error: out of memory (tried to allocate 512.00 MiB; 20.00 MiB free of 79.10 GiB); "
                   "try fewer envs")
    assert memory.oom_summary("DefaultCPUAllocator: not enough memory: you tried to allocate 3019898880 bytes.") \
        == "tried to allocate 2.81 GiB"
