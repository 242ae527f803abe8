"""Training on several processes with torch.distributed: the process group and the few collectives the training
session needs (docs/training.md "Several GPUs").

A launcher (`torchrun`, or `gbxcule train --gpus G`, which runs torch's own) starts one process per GPU and
gives each RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address in its environment. `World.join` reads them:
with WORLD_SIZE > 1 it joins the process group (NCCL on CUDA, each process on cuda:LOCAL_RANK; gloo on the
CPU device) with a collective timeout, plus a gloo group for host-side control (decisions, checkpoint gathers),
so those never wait on the GPU. Without a launcher it is a world of one and every method is a no-op.

Every collective goes through a `World` method, which turns a failure (a process that died, a timeout) into
`RankFailure`, one line. Errors that every process raises alike are reported by rank 0 alone: the others mark
theirs `quiet` (the CLI prints nothing for those).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from datetime import timedelta

from gbxcule.core.errors import GbxculeError


class RankFailure(GbxculeError):
    """A collective failed: another process of the run ended or stopped answering (or the timeout passed)."""


def launched_rank() -> int:
    """This process's rank as the launcher set it (0 without a launcher)."""
    return int(os.environ.get("RANK", "0"))


def launched_world_size() -> int:
    """How many processes the launcher started (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def quiet(exc: BaseException) -> BaseException:
    """Mark an error that rank 0 reports for every process: the CLI prints nothing for it on this one."""
    exc.quiet = True  # type: ignore[attr-defined]
    return exc


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def backend_reason(exc: BaseException) -> str:
    """The gist of a torch.distributed error: its first sentence, without the source location gloo prefixes."""
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h|hpp):\d+\]\s*", "", first_line(exc))
    return text.split(". ")[0].rstrip(".")


def dynamo_first() -> None:
    """Import torch._dynamo before a process group exists. Its first import (the first optimizer a trainer builds
    does it) keeps references to every live process group, so imported later it stops destroy_process_group from
    freeing the group: gloo's (or NCCL's) threads then outlive `World.close` and are torn down with the
    interpreter, which can abort the process (SIGABRT) after a run that finished well."""
    with contextlib.suppress(ImportError):  # a torch without dynamo keeps no such references
        import torch._dynamo  # noqa: F401


class World:
    """The processes of one run: `rank` of `size`, `local_rank` of `local_size` on this host. A world of one does
    nothing."""

    def __init__(self, rank: int = 0, size: int = 1, local_rank: int = 0, backend: str | None = None,
                 ctrl=None, owns_group: bool = False, local_size: int = 1):
        self.rank, self.size, self.local_rank, self.backend = rank, size, local_rank, backend
        self.local_size = local_size
        self._ctrl = ctrl  # the gloo group for host objects (None: the default group, itself gloo)
        self._owns = owns_group
        self._flat: dict = {}

    @property
    def lead(self) -> bool:
        return self.rank == 0

    def __repr__(self) -> str:
        return f"World(rank={self.rank}, size={self.size}, backend={self.backend})"

    # --- joining and leaving ----------------------------------------------------------------------------------
    @classmethod
    def join(cls, device: str, timeout_s: float) -> World:
        """The world the launcher's environment describes; joins the process group when it has several
        processes (`device`: "cpu" or "cuda": the backend follows it)."""
        size = launched_world_size()
        if size <= 1:
            return cls()
        import torch
        import torch.distributed as dist

        rank, local = launched_rank(), int(os.environ.get("LOCAL_RANK", "0"))
        cuda = device.startswith("cuda")
        if cuda:
            if local >= torch.cuda.device_count():
                raise GbxculeError(f"process {rank} has LOCAL_RANK {local}, but this host shows "
                                   f"{torch.cuda.device_count()} GPU(s): start at most one process per GPU")
            torch.cuda.set_device(local)
        backend = "nccl" if cuda else "gloo"
        timeout = timedelta(seconds=timeout_s)
        owns = not dist.is_initialized()
        if owns:
            dynamo_first()
        try:
            if owns:
                dist.init_process_group(backend, timeout=timeout,
                                        device_id=torch.device("cuda", local) if cuda else None)
            ctrl = dist.new_group(backend="gloo", timeout=timeout) if dist.get_backend() != "gloo" else None
        except (RuntimeError, ValueError) as exc:
            raise RankFailure(f"process {rank} of {size} could not join the others ({first_line(exc)}); check "
                              f"MASTER_ADDR/MASTER_PORT or torchrun's --rdzv-endpoint") from None
        return cls(rank, size, local, dist.get_backend(), ctrl, owns,
                   local_size=int(os.environ.get("LOCAL_WORLD_SIZE", size)))

    def close(self, clean: bool = True) -> None:
        """Leave the process group (only a clean exit waits on it: after a failure the process just ends)."""
        if self.size > 1 and self._owns and clean:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._owns = False

    def place(self, device: str) -> str:
        """The device this process trains on: cuda:LOCAL_RANK on several processes, else `device`."""
        if self.size == 1 or device == "cpu":
            return device
        if ":" in device:
            raise GbxculeError(f"run.device {device} names one GPU, but each of the {self.size} processes takes "
                               f"its own (cuda:LOCAL_RANK): use cuda or auto")
        return f"cuda:{self.local_rank}"

    # --- collectives ------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:  # torch.distributed's errors (DistBackendError, ...) are RuntimeErrors
            raise RankFailure(f"another of the {self.size} processes ended or stopped answering ({what}: "
                              f"{backend_reason(exc)})") from None

    def all_reduce_sum_(self, t):
        """Sum `t` over the processes, in place (on its device)."""
        if self.size > 1:
            import torch.distributed as dist

            self._call("a metrics all-reduce", dist.all_reduce, t, op=dist.ReduceOp.SUM)
        return t

    def all_mean(self, t):
        """The mean of `t` over the processes (a new tensor; `t` itself in a world of one)."""
        if self.size == 1:
            return t
        return self.all_reduce_sum_(t.detach().clone()).div_(self.size)

    def all_gather(self, t):
        """Every process's `t` (same shape everywhere) stacked along a new first dimension, in rank order."""
        import torch

        if self.size == 1:
            return t.unsqueeze(0)
        import torch.distributed as dist

        parts = [torch.empty_like(t) for _ in range(self.size)]
        self._call("an all-gather", dist.all_gather, parts, t.contiguous())
        return torch.stack(parts)

    def average_gradients(self, params) -> None:
        """Replace every parameter's gradient by its mean over the processes: one all-reduce of the flat
        gradients per dtype (a buffer kept between calls), then copied back."""
        if self.size == 1:
            return
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in params if p.grad is not None]
        for dtype in dict.fromkeys(g.dtype for g in grads):
            group = [g for g in grads if g.dtype == dtype]
            n = sum(g.numel() for g in group)
            key = (dtype, group[0].device)
            flat = self._flat.get(key)
            if flat is None or flat.numel() != n:
                flat = self._flat[key] = torch.empty(n, dtype=dtype, device=group[0].device)
            torch.cat([g.reshape(-1) for g in group], out=flat)
            self._call("the gradient all-reduce", dist.all_reduce, flat, op=dist.ReduceOp.SUM)
            flat.div_(self.size)
            at = 0
            for g in group:
                g.copy_(flat[at:at + g.numel()].view_as(g))
                at += g.numel()

    def broadcast_module(self, module) -> None:
        """Rank 0's parameters and buffers into every process's copy of `module` (same architecture)."""
        if self.size == 1:
            return
        import torch.distributed as dist

        for t in [*module.parameters(), *module.buffers()]:
            self._call("the parameter broadcast", dist.broadcast, t.data, src=0)

    def data_parallel(self, module, cuda: bool):
        """`module` in DistributedDataParallel (which gives every process rank 0's weights as it starts)."""
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.local_rank] if cuda else None
        return self._call("DistributedDataParallel's start", DistributedDataParallel, module, device_ids=ids)

    def differing_ranks(self, module) -> list[int]:
        """The ranks whose parameters differ from rank 0's in any bit (an all-gather of all of them)."""
        if self.size == 1:
            return []
        import torch

        flat = torch.cat([p.detach().reshape(-1).float().view(torch.int32) for p in module.parameters()])
        every = self.all_gather(flat)
        return [r for r in range(1, self.size) if not torch.equal(every[r], every[0])]

    def decide(self, values: list[int]) -> list[int]:
        """Rank 0's `values` (small integers: stop and checkpoint decisions) on every process (gloo, host)."""
        if self.size == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.int64)
        self._call("the per-update decision broadcast", dist.broadcast, t, src=0, group=self._ctrl)
        return [int(x) for x in t.tolist()]

    def gather_objects(self, obj) -> list | None:
        """Every process's `obj` (picklable) in rank order on rank 0; None on the others (gloo, host)."""
        if self.size == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.size if self.lead else None
        self._call("the checkpoint gather", dist.gather_object, obj, out, dst=0, group=self._ctrl)
        return out

    def agree(self, fn: Callable):
        """Run `fn` on every process; if it raised a user error (GbxculeError, ValueError) on any, raise on all:
        rank 0 raises the first one (its own, or "rank R: ..." for another's), the others a quiet copy."""
        err: BaseException | None = None
        out = None
        try:
            out = fn()
        except (GbxculeError, ValueError) as exc:
            if self.size == 1:
                raise
            err = exc
        if self.size == 1:
            return out
        import torch.distributed as dist

        msgs: list = [None] * self.size
        self._call("a start-up check", dist.all_gather_object, msgs, None if err is None else first_line(err),
                   group=self._ctrl)
        failed = [(r, m) for r, m in enumerate(msgs) if m is not None]
        if not failed:
            return out
        r, msg = failed[0]
        if self.lead:
            if r == 0 and err is not None:
                raise err
            raise GbxculeError(f"rank {r}: {msg}")
        raise quiet(err if err is not None else GbxculeError(msg))
