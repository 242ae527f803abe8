"""PPO from pixels with the whole loop on the device: rollouts of `rollout_steps` x `num_envs`, GAE with bootstrap
on truncation, the clipped surrogate, minibatch epochs. One file, CleanRL's unit: config, model, loss, loop; what
several algorithms share (GAE, clipping, schedules, minibatches) is `rl/returns.py`, the shell (run folder, logs,
eval, checkpoints, stop rules) `rl/session.py`.

    gbxcule train --algo ppo --task leave_house --num-envs 4096 --total-steps 20000000
    gbxcule train --config configs/leave_house_ppo_share.toml   # one epoch, half the envs train each rollout

With `learn_share` s < 1 every env acts, but only a block of ceil(s x num_envs) envs (moving on each update) is
stored and trained on: at 16-65K envs the learner sets the pace, and one epoch uses each sample once.

With `gru = H` the policy is recurrent (a GRU of H over the CNN features, reset where an episode ends; with
env.archive.memory = "cell" to its cell's kept state): every acting env carries its state; the state each learning
env starts a rollout with is kept, and the update's minibatches are groups of learning envs whose whole rollouts are
unrolled again from it, as CleanRL's LSTM PPO does. `overlap` collects each rollout beside the learner's update of
the one before, correcting for acting one update behind."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from gbxcule.core.typed import knob
from gbxcule.rl import returns
from gbxcule.rl.archive import explorer_envs, keeps_memory, memory_bytes
from gbxcule.rl.config import ConfigError
from gbxcule.rl.models import MODELS, VIEWS, ActorCritic, activation_bytes, epsilon_soft
from gbxcule.rl.session import AlgoSpec, NonFiniteError, Session


@dataclass
class PPOConfig:
    rollout_steps: int = knob(32, min=1)
    epochs: int = knob(4, min=1)
    minibatches: int = knob(4, min=1)
    learn_share: float = knob(1.0, gt=0, max=1)  # every env acts; a moving block of ceil(share * envs) learns
    lr: float = knob(2.5e-4, gt=0)
    anneal_lr: bool = True
    gamma: float = knob(0.99, min=0, max=1)
    gae_lambda: float = knob(0.95, min=0, max=1)
    clip: float = knob(0.1, gt=0)
    clip_vloss: bool = True
    ent_coef: float = knob(0.01, min=0)
    explore_eps: float = knob(0.0, min=0, max=1)  # epsilon-soft acting, learned as the policy's own (docs/training.md)
    vf_coef: float = knob(0.5, min=0)
    max_grad_norm: float = knob(0.5, gt=0)
    norm_adv: bool = True
    target_kl: float | None = knob(None, gt=0)  # stop an update's epochs once approx_kl passes it
    model: str = knob("nature", choices=MODELS)
    view: str = knob("full", choices=VIEWS)  # what of the frame the CNN sees (rl/models.py VIEWS)
    milestone_row: bool = False  # the hidden layer also reads the shown milestones' row as a vector (rl/models.py)
    level_heads: int = knob(0, min=0, max=21)  # a policy and value head per shown milestone level (rl/models.py)
    channels_last: bool = False  # the CNN's weights and activations channels-last (NHWC): fewer cuDNN layout copies
    compile: bool = False
    amp: str = knob("auto", choices=("auto", "bf16", "off"))  # auto: bf16 autocast on CUDA
    gru: int | None = knob(None, min=1, max=4096)  # a recurrent policy: a GRU of this size over the CNN features
    gru_skip: bool = False  # with gru: the heads read the CNN's features beside the GRU's state
    overlap: bool = False  # collect each rollout beside the learner's update of the one before (docs/training.md)


def build_model(p: PPOConfig, num_actions: int, stack_k: int, packed: bool) -> ActorCritic:
    return ActorCritic(num_actions, stack_k, packed, p.model, gru=p.gru, gru_skip=p.gru_skip, view=p.view,
                       milestone_row=p.milestone_row, level_heads=p.level_heads)


def acting_envs(cfg) -> int:
    """The envs the policy acts in: all but the state archive's explorers (`env.archive.explorers`), the last."""
    return cfg.env.num_envs - explorer_envs(cfg.env.archive, cfg.env.num_envs)


def learn_envs(cfg) -> int:
    """How many envs' rollouts are stored and trained on (every acting env unless `ppo.learn_share` < 1)."""
    n = acting_envs(cfg)
    return n if cfg.ppo.learn_share >= 1 else max(1, math.ceil(cfg.ppo.learn_share * n))


def steps_per_update(cfg) -> int:
    return cfg.env.num_envs * cfg.ppo.rollout_steps


def batch_size(cfg) -> int:  # samples trained on per update
    return learn_envs(cfg) * cfg.ppo.rollout_steps


def check(cfg) -> None:
    p = cfg.ppo
    if p.minibatches > batch_size(cfg):
        raise ConfigError(f"ppo.minibatches ({p.minibatches}) exceeds the batch ({batch_size(cfg)})")
    if (p.gru_skip or keeps_memory(cfg.env.archive)) and p.gru is None:
        raise ConfigError(f"{'ppo.gru_skip' if p.gru_skip else 'env.archive.memory = cell'} needs ppo.gru (a GRU)")
    if p.gru is not None:
        if p.minibatches > learn_envs(cfg):
            raise ConfigError(f"ppo.gru: a minibatch is a group of envs, so ppo.minibatches ({p.minibatches}) may "
                              f"not exceed the envs trained on each update ({learn_envs(cfg)} of env.num_envs "
                              f"{cfg.env.num_envs})")
        if p.overlap:
            raise ConfigError("ppo.overlap needs a feed-forward policy: ppo.gru's learner unrolls each rollout from "
                              "its envs' start states, which the rollout collected beside it moves")
        if cfg.run.grad_sync == "ddp":
            raise ConfigError("ppo.gru unrolls the model outside DDP's forward: use run.grad_sync = \"allreduce\"")


def rollout_bytes(cfg, obs_bytes: int) -> int:
    """Device bytes of the rollout storage: observations twice (the obs and the finished episodes' last obs, for
    truncation bootstraps), actions, log-probs, values, rewards, flags, advantages, returns; with a GRU the learning
    envs' state after every step and at the rollout's start, every env's carried state (on a block, its step state
    too), what env.archive.memory = "cell" keeps; with `overlap` a second rollout, what both keep for GAE."""
    h = 4 * (cfg.ppo.gru or 0)
    every = cfg.env.num_envs * (1 + (learn_envs(cfg) < cfg.env.num_envs))
    second = (batch_size(cfg) * (obs_bytes + 8 + 4 * 8 + 4) + 2 * learn_envs(cfg) * obs_bytes) if cfg.ppo.overlap else 0
    kept = memory_bytes(cfg.env.archive, cfg.env.num_envs, batch_size(cfg), h)  # env.archive.memory = "cell"
    return batch_size(cfg) * (2 * obs_bytes + 8 + 4 * 6 + 2 + h) + (learn_envs(cfg) + every) * h + second + kept


def working_bytes(cfg) -> tuple[int, int]:
    """(per env, fixed) device bytes of the learner's peak: a minibatch's forward and backward, or acting for all."""
    p, e = cfg.ppo, cfg.env
    kw, net = (p.model, e.stack_k, e.obs == "packed"), {"gru": p.gru, "gru_skip": p.gru_skip, "view": p.view}
    peak = max(-(-batch_size(cfg) // p.minibatches) * activation_bytes(*kw, True, **net),
               e.num_envs * activation_bytes(*kw, False, **net))
    return -(-peak // e.num_envs), 0


# --- the loss ----------------------------------------------------------------------------------------------------
def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + eps)


@dataclass(frozen=True)
class LossCoefs:
    clip: float = 0.1
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    clip_vloss: bool = True


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, new_values: torch.Tensor,
             old_values: torch.Tensor, ret: torch.Tensor, entropy: torch.Tensor,
             c: LossCoefs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped PPO objective for one minibatch. Returns (loss, device scalars: pg_loss, v_loss,
    entropy, approx_kl (the (r - 1) - log r estimator), clipfrac). Tests: tests/test_ppo.py."""
    logratio = new_logp - old_logp
    pg = returns.clipped_surrogate(logratio, adv, c.clip)
    v_loss = (returns.clipped_value_loss(new_values, old_values, ret, c.clip) if c.clip_vloss
              else 0.5 * ((new_values - ret) ** 2).mean())
    ent = entropy.mean()
    loss = pg - c.ent_coef * ent + c.vf_coef * v_loss
    with torch.no_grad():
        kl = {"approx_kl": returns.approx_kl(logratio), "clipfrac": returns.clip_fraction(logratio, c.clip)}
    return loss, {"pg_loss": pg.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach(), **kl}


def unroll(model: ActorCritic, obs: torch.Tensor, state: torch.Tensor, dones: torch.Tensor,
           starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [T, N, A], values [T, N]) of a recurrent model over a rollout's observations [T, N, ...] from the
    state its envs started it with [N, H], the state reset after each step where the episode ended (dones [T, N])
    to zero or, given `starts` [T, N, H], to the state the next episode began with there, as acting did: the
    CNN over all T x N observations at once, then the GRU step by step, then the heads over all (tests/test_ppo.py)."""
    t_len, n = obs.shape[:2]
    feats = model.features(obs.reshape(t_len * n, *obs.shape[2:])).reshape(t_len, n, -1)
    hs = []
    for t in range(t_len):
        h = model.rnn(feats[t], state.to(feats.dtype))
        hs.append(h)
        state = torch.where(dones[t].unsqueeze(-1), 0.0 if starts is None else starts[t].to(h.dtype), h)
    return model.heads(feats, torch.stack(hs), model.levels(obs))


# --- the loop ------------------------------------------------------------------------------------------------------
def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    p = cfg.ppo
    with Session(cfg, checkpoint, echo, device_bytes=lambda ob: rollout_bytes(cfg, ob),
                 steps_per_update=steps_per_update(cfg), working_bytes=working_bytes(cfg)) as s:
        env = s.env
        model = build_model(p, env.num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        model = model.to(memory_format=torch.channels_last) if p.channels_last else model
        optimizer = torch.optim.Adam(model.parameters(), lr=p.lr, eps=1e-5)
        fwd = torch.compile(model) if p.compile else model
        learner = s.wrap(model)  # DDP over the model with run.grad_sync = "ddp" on several processes
        train_fwd = fwd if learner is model else (torch.compile(learner) if p.compile else learner)
        sampler = torch.Generator().manual_seed(cfg.run.seed)
        state = model.initial_state(env.num_envs, env.device)  # a GRU's state, carried across updates (else None)
        kept = state is not None and env.keep_policy_state(state.shape[1])  # an episode from a cell: its kept state

        t_len, n, dev, obs_shape = p.rollout_steps, env.num_envs, env.device, env.single_obs_shape
        n_learn, n_act = learn_envs(cfg), acting_envs(cfg)
        # the envs that feed the learner: all, or a block of n_learn of the n_act acting ones (the archive's
        # explorers never) that moves on by n_learn envs each update
        block = None if n_learn == n else torch.arange(n_learn, device=dev)
        ids = None if n_learn == n else torch.empty(n_learn, dtype=torch.int64, device=dev)

        def put(dst, x):  # dst <- x's rows of the learning envs
            return dst.copy_(x) if ids is None else torch.index_select(x, 0, ids, out=dst)

        def rows(x):  # x's rows of the learning envs (a new tensor on a block: once an update)
            return x if ids is None or x is None else x.index_select(0, ids)

        def rollout() -> dict:  # what the learner reads of a rollout (two with ppo.overlap, whose GAE waits for
            # the learner's values: then also its rewards, ends, truncation bootstraps and last observations)
            tn, u8, f32 = (t_len, n_learn), torch.uint8, torch.float32
            spec = {"obs": ((*tn, *obs_shape), u8), "act": (tn, torch.int64), "logp": (tn, f32), "val": (tn, f32)}
            if p.overlap:
                spec.update(rew=(tn, f32), dones=(tn, torch.bool), trunc=(tn, torch.bool), final=(tn, f32),
                            last_obs=((n_learn, *obs_shape), u8))
            return {k: torch.zeros(shape, dtype=d, device=dev) for k, (shape, d) in spec.items()}

        bufs = [rollout() for _ in range(2 if p.overlap else 1)]
        # read only while a rollout is collected (its advantages are computed at its end): one set either way
        final_buf = torch.zeros((t_len, n_learn, *obs_shape), dtype=torch.uint8, device=dev)
        rew_buf, term_buf, trunc_buf = (torch.zeros((t_len, n_learn), dtype=d, device=dev)
                                        for d in (torch.float32, torch.bool, torch.bool))
        if state is not None:  # the state each learning env starts the rollout with, and each step's (truncations)
            h0 = torch.zeros((n_learn, state.shape[1]), dtype=state.dtype, device=dev)
            h_buf = torch.zeros((t_len, n_learn, state.shape[1]), dtype=torch.float32, device=dev)
            start_buf = torch.zeros_like(h_buf) if kept else None  # each step's next state (new episodes' starts)
            h_all = None if ids is None else torch.zeros_like(state)  # on a block: every env's step state
        coefs = LossCoefs(p.clip, p.vf_coef, p.ent_coef, p.clip_vloss)
        timer = s.timer
        # ppo.overlap: the acting model, a copy of the learner's weights as they were when the rollout began, and
        # the stream its rollout runs on beside the learner's update of the rollout before (None: in turn)
        from gbxcule.backends import join_stream, new_stream, on_stream

        actor = copy.deepcopy(model).requires_grad_(False) if p.overlap else None
        env_stream = new_stream(dev) if p.overlap else None
        act_fwd = fwd if actor is None else (torch.compile(actor) if p.compile else actor)
        pending: list = []  # ppo.overlap: the rollout the next update trains on (checkpointed with the envs' state)
        extra = s.start(model, optimizer, describe=s.plan_line(model),
                        state=lambda: {"sampler": sampler.get_state(),
                                       "state": state.cpu().clone() if state is not None and s.emu_state
                                       else None,  # (envs restarted on load begin their episodes' own)
                                       "pending": {k: v.cpu().clone() for k, v in pending[0].items()}
                                       if pending and s.emu_state else None})
        if extra:
            sampler.set_state(extra["sampler"])
            if state is not None:  # restarted envs: new episodes, each its start's state
                env.restart_policy_state(state) if env.restarted else state.copy_(extra["state"])
            if p.overlap and extra.get("pending") is not None:  # into the set the update before filled
                pending.append(bufs[(s.update + 1) % 2])
                for k, v in pending[0].items():
                    v.copy_(extra["pending"][k])
        if actor is not None:
            actor.load_state_dict(model.state_dict())

        def act(t: int, b: dict, net) -> None:
            """Step t of the rollout into `b`: `net` acts for every env, the env steps."""
            mark = timer.start("inference")
            x = put(b["obs"][t], env.obs) if ids is None else env.obs  # every env acts
            with torch.no_grad(), s.autocast(p.amp):
                if state is None:
                    logits, value = net(x)
                else:
                    logits, value, h = model.forward_step(x, state)
                    h_step = h_buf[t] if ids is None else h_all  # float32: copy_ casts autocast's bf16
                    h_step.copy_(h)
                    if ids is not None:
                        put(h_buf[t], h_step)
            dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
            action = dist.sample()
            if p.explore_eps:  # a uniform action instead; its log-probability below is the policy's, as if sampled
                action = epsilon_soft(action, env.num_actions, p.explore_eps)
            if ids is not None:
                put(b["obs"][t], env.obs)
            for k, x in (("act", action), ("logp", dist.log_prob(action)), ("val", value.float())):
                put(b[k][t], x)
            timer.stop(mark)
            mark = timer.start("env")
            _, reward, term, trunc, _ = env.step(action, None if state is None else h_step)
            for buf, x in ((rew_buf, reward), (term_buf, term), (trunc_buf, trunc), (final_buf, env.final_obs)):
                put(buf[t], x)
            if state is not None:  # every acting env's state, that of its new episode's start where one ended
                env.next_policy_state(h_step, out=state)
                if kept:
                    put(start_buf[t], state)
            timer.stop(mark)

        def advantages(b: dict, net) -> None:
            """GAE of the rollout in `b` by `net` (the model that acted), bootstrapped on truncation; with
            ppo.overlap what GAE needs, kept for the learner (`proximal` computes it with its own values)."""
            with torch.no_grad(), s.autocast(p.amp):
                # one sync an update; a GRU reads a finished episode's last observation with its last step's state
                final_values = returns.truncated_values(net.value, final_buf, trunc_buf,
                                                        states=None if state is None else h_buf)
                if p.overlap:
                    b["final"].copy_(final_values)
                    torch.bitwise_or(term_buf, trunc_buf, out=b["dones"])
                    for k, x in (("rew", rew_buf), ("trunc", trunc_buf), ("last_obs", rows(env.obs))):
                        b[k].copy_(x)
                    return
                last_value = net.value(rows(env.obs), rows(state)).float()
                b["dones"] = term_buf | trunc_buf
                b["adv"], b["ret"] = returns.gae(rew_buf, b["val"], b["dones"], last_value, p.gamma, p.gae_lambda,
                                                 trunc_buf, final_values)

        def learn(b: dict, out: dict):
            """PPO's epochs over the rollout in `b`, one optimizer step a `next`; `out` gets the stats."""
            b_obs = b["obs"].reshape(t_len * n_learn, *obs_shape)
            b_act, b_logp = b["act"].reshape(-1), b["logp"].reshape(-1)
            if actor is None:
                adv, ret, b_val, prox_logp, lag_w = b["adv"], b["ret"], b["val"].reshape(-1), b_logp, None
            else:  # acted one update behind: the learner's own policy and values (`proximal`)
                prox_logp, b_val, adv, ret = proximal(b, b_obs, b_act)
                lag_w = (prox_logp - b_logp).exp()
            b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
            by_level = returns.LevelMeans(model.level_heads, dev, model.levels(b_obs))  # each head's entropy
            stats = []
            for _epoch in range(p.epochs):
                groups = returns.minibatches(n_learn if state is not None else t_len * n_learn, p.minibatches,
                                             sampler, dev)
                for mb in groups:
                    with s.autocast(p.amp):
                        if state is None:
                            logits, new_v = train_fwd(b_obs[mb])
                        else:  # a group of envs' whole rollouts, unrolled from their start states
                            logits, new_v = unroll(model, b["obs"][:, mb], h0[mb], b["dones"][:, mb],
                                                   start_buf[:, mb] if kept else None)
                            logits, new_v = logits.flatten(0, 1), new_v.flatten(0, 1)
                            mb = (torch.arange(t_len, device=dev)[:, None] * n_learn + mb).reshape(-1)
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    a = normalize(b_adv[mb]) if p.norm_adv else b_adv[mb]
                    a = a if lag_w is None else a * lag_w[mb]
                    loss, m = ppo_loss(dist.log_prob(b_act[mb]), prox_logp[mb], a, new_v.float(), b_val[mb], b_ret[mb],
                                       ent := dist.entropy(), coefs)
                    by_level.add(mb, ent)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    m["grad_norm"] = s.apply_gradients(model, optimizer, p.max_grad_norm)
                    m["loss"] = loss.detach()
                    stats.append(torch.stack([v.float() for v in m.values()]))
                    out["names"] = list(m)
                    yield
                epoch_stats = s.all_mean(torch.stack(stats).mean(0))  # every process takes the same decision
                if not bool(torch.isfinite(epoch_stats).all()):  # once per epoch
                    raise NonFiniteError(dict(zip(out["names"], epoch_stats.tolist(), strict=True)))
                if p.target_kl is not None and float(epoch_stats[out["names"].index("approx_kl")]) > p.target_kl:
                    break
            mean = torch.stack(stats).mean(0)
            out["metrics"] = {**dict(zip(out["names"], mean.unbind(0), strict=True)),
                              "explained_variance": returns.explained_variance(b_val, b_ret),
                              "value_mean": b_val.mean(), "value_std": b_val.std(), "adv_mean": b_adv.mean(),
                              "adv_std": b_adv.std(), "actions": returns.action_counts(b_act, env.num_actions),
                              **by_level.read("entropy")}
            if lag_w is not None:  # how far the learner had moved from the policy that acted
                out["metrics"]["lag_kl"] = returns.approx_kl(prox_logp - b_logp)

        def proximal(b, obs, actions):
            """ppo.overlap: the learner's weights as its update begins (the proximal policy) over the rollout in
            `b`, in minibatch-sized chunks without gradients: (log-probabilities of its actions, values, and GAE's
            advantages and returns from those values; a truncation's bootstrap stays the acting model's)."""
            with torch.no_grad(), s.autocast(p.amp):
                logp, val = returns.policy_over(fwd, obs, actions, -(-len(actions) // p.minibatches))
                last_value = model.value(b["last_obs"]).float()
            adv, ret = returns.gae(b["rew"], val.view(t_len, n_learn), b["dones"], last_value, p.gamma, p.gae_lambda,
                                   b["trunc"], b["final"])
            return logp, val, adv, ret

        # ppo.overlap: a rollout step's share of the learner's optimizer steps, queued after it (the device runs both)
        per_step = -(-p.epochs * p.minibatches // t_len)
        while s.running:
            lr = returns.linear_lr(p.lr, s.update, s.num_updates, p.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            if ids is not None:  # this update's block of learning envs (its start known on the host)
                torch.add(block, s.update * n_learn % n_act, out=ids).remainder_(n_act)
            if state is not None:
                put(h0, state)
            b, out = bufs[s.update % len(bufs)], {}
            # in turn: collect, then learn from it; overlapped: collect with the weights the update began with
            # (on env_stream) while learning from the rollout before, a share of its steps after each env-step
            steps = learn(pending.pop(), out) if pending else iter(())
            for t in range(t_len):
                with on_stream(dev, env_stream, after_current=t == 0):
                    act(t, b, act_fwd)
                if actor is not None:
                    mark = timer.start("update")
                    for _ in zip(range(per_step), steps, strict=False):
                        pass
                    timer.stop(mark)
            mark = timer.start("update")
            with on_stream(dev, env_stream):
                advantages(b, model if actor is None else actor)
            for _ in learn(b, out) if actor is None else steps:
                pass
            timer.stop(mark)
            if actor is not None:  # the learner's weights act next; this rollout is learned from next
                join_stream(env_stream)
                actor.load_state_dict(model.state_dict())  # (copies in place, on the training's stream)
                pending.append(b)
            metrics = {"lr": lr, **out.get("metrics", {})}
            if "actions" not in metrics:  # the first update of an overlapped run collects only
                metrics["actions"] = returns.action_counts(b["act"].reshape(-1), env.num_actions)
            s.end_update(t_len * n, metrics, guard=out.get("names", ()))
    return s.summary


ALGO = AlgoSpec("ppo", PPOConfig, build_model, steps_per_update, train, check=check, working_bytes=working_bytes,
                explorers=True, cell_memory=True, summary="PPO (the default): rollouts, minibatch epochs")
