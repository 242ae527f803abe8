"""One process of tests/test_distributed.py's gradient check (started with RANK, WORLD_SIZE, MASTER_ADDR/PORT in
its environment, as torchrun starts one): the PPO loss gradient of this rank's share of a fixed batch, averaged
over the processes by `World.average_gradients` (the flat all-reduce of `Session.apply_gradients`) and by
DistributedDataParallel (`run.grad_sync = "ddp"`); both saved to OUT.rank.pt, with what `World.differing_ranks`
(`run.check_sync`) says before and after rank 1 changes one weight, and which of the group's threads outlive
`World.close` once an optimizer has been built (none may: the group must really be freed).

    python tests/dist_worker.py OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from gbxcule.rl.algos import ppo
from gbxcule.rl.models import ActorCritic

BATCH = 12


def fixed_batch(n: int = BATCH):
    """The same batch in every process: observations, actions, old log-probs, advantages, returns, values."""
    g = torch.Generator().manual_seed(7)
    return (torch.randint(0, 4, (n, 1, 72, 80), generator=g, dtype=torch.uint8), torch.randint(0, 8, (n,), generator=g),
            -2 * torch.rand(n, generator=g), torch.randn(n, generator=g), torch.randn(n, generator=g),
            torch.randn(n, generator=g))


def model() -> ActorCritic:
    torch.manual_seed(3)
    return ActorCritic(8, 1, False, "small")


def backward(net, fwd, part) -> None:
    """The PPO loss of `part` (a mean over its samples), backpropagated into `net`'s gradients."""
    obs, act, old_logp, adv, ret, val = part
    net.zero_grad(set_to_none=True)
    logits, v = fwd(obs)
    d = torch.distributions.Categorical(logits=logits)
    loss, _ = ppo.ppo_loss(d.log_prob(act), old_logp, adv, v, val, ret, d.entropy(), ppo.LossCoefs())
    loss.backward()


def grads(net) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in net.parameters()]


def group_threads() -> list[str] | None:
    """The names of this process's threads that belong to a process group (gloo's), None where /proc is not."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    names = [(t / "comm").read_text().strip() for t in tasks.iterdir()]
    return sorted(n for n in names if "gloo" in n)


def main(out: str) -> None:
    from gbxcule.rl.dist import World

    world = World.join("cpu", timeout_s=60)
    share = BATCH // world.size
    part = tuple(t[world.rank * share:(world.rank + 1) * share] for t in fixed_batch())
    net = model()
    backward(net, net, part)
    world.average_gradients(list(net.parameters()))
    flat = grads(net)
    net = model()
    ddp = world.data_parallel(net, cuda=False)
    backward(net, ddp, part)
    same = world.differing_ranks(net)
    with torch.no_grad():  # rank 1 changes one weight by one step of float32: the sync check must see it
        w = next(net.parameters()).view(-1)
        if world.rank == 1:
            w[0] = torch.nextafter(w[0], torch.tensor(1.0))
    result = {"allreduce": flat, "ddp": grads(net), "same": same, "differing": world.differing_ranks(net),
              "rank": world.rank, "size": world.size}
    torch.optim.Adam(net.parameters())  # as a trainer does once the group exists
    del ddp
    world.close()
    result["threads_after_close"] = group_threads()
    torch.save(result, f"{out}.{world.rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
