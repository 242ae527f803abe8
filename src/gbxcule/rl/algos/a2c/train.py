"""Streaming A2C from pixels: no rollout buffer. Each env-step: logits and value of the current observations,
sample, step the env, bootstrap from the next observation's value under no_grad (the finished episode's last
observation where the step was truncated: truncation is not terminal), policy, value and entropy losses,
backward; the optimizer steps every `update_every` env-steps (gradient accumulation). With `n_step` > 1 the
targets are lambda-returns over windows of n env-steps instead (acting without gradients, one forward with
gradients over the window); with `minibatches` > 1 the window's samples are split at random into that many
optimizer steps (each sample used once: more steps, no reuse), with `clip` under PPO's clip against the acting
policy. One file, CleanRL-style; the math is in `loss.py` and `rl/returns.py`, the shell in `rl/loop.py`
(docs/training.md "A2C").

    gbxcule train --config configs/leave_house_a2c.toml          # the windowed setting that learns leave_house
    gbxcule train --algo a2c --task leave_house --num-envs 16384  # streaming TD(0), the algorithm's defaults
"""

from __future__ import annotations

import math

import torch

from gbxcule.rl import returns
from gbxcule.rl.algos.a2c import build_model, learn_envs, steps_per_update
from gbxcule.rl.algos.a2c.loss import A2CCoefs, a2c_loss, adapt_ent_coef, bootstrap_obs
from gbxcule.rl.loop import Session

STAT_NAMES = ("pg_loss", "v_loss", "entropy", "adv_mean", "adv_std", "value_mean")


def storage_bytes(cfg, obs_bytes: int) -> int:
    """Device bytes besides the env and the model: the bootstrap observations (streaming), or the window's
    observations, final observations and per-step scalars of the envs that feed the learner (n_step > 1)."""
    a, n = cfg.a2c, cfg.env.num_envs
    if a.n_step == 1:
        return n * (obs_bytes + 64 + 4 * (a.gru or 0))
    return a.n_step * learn_envs(cfg) * (2 * obs_bytes + 8 + 4 * 4 + 2)


def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    a = cfg.a2c
    with Session(cfg, checkpoint, echo, device_bytes=lambda ob: storage_bytes(cfg, ob),
                 steps_per_update=steps_per_update(cfg)) as s:
        env = s.env
        n, dev, obs_shape = env.num_envs, env.device, env.single_obs_shape
        n_learn = learn_envs(cfg)  # the envs whose samples train (all unless learn_share < 1)
        model = build_model(a, env.num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-5)
        step_fn = torch.compile(model.forward_step) if a.compile else model.forward_step
        state = model.initial_state(n, dev)
        sampler = torch.Generator().manual_seed(cfg.run.seed)  # the minibatch split (minibatches > 1)
        # the adaptive entropy weight's log, on the device (target_entropy), and the entropy it aims at
        log_coef = (torch.tensor(math.log(max(a.ent_coef, 1e-4)), device=dev)
                    if a.target_entropy is not None else None)
        ent_target = None if a.target_entropy is None else a.target_entropy * math.log(env.num_actions)
        lr_kl = a.lr  # the KL-adaptive lr of this update (target_kl), adapted on the host after each update's read
        extra = s.start(model, optimizer, state=lambda: {"state": None if state is None else state.cpu().clone(),
                                                         "sampler": sampler.get_state(),
                                                         "log_coef": None if log_coef is None else log_coef.cpu(),
                                                         "lr_kl": (lr_kl, s.read.get("approx_kl"))},
                        describe=f"a2c: {s.storage_bytes / 2**20:,.0f} MiB of step storage on {s.device}; "
                                 f"{s.num_updates} updates of {s.update_steps:,} env-steps, an optimizer "
                                 f"step every {a.update_every} env-steps ({a.update_every * n:,} samples); model "
                                 f"{model.describe()['params']:,} parameters")
        if extra and extra.get("state") is not None:
            state.copy_(extra["state"])
        if extra and extra.get("sampler") is not None:
            sampler.set_state(extra["sampler"])
        if extra and extra.get("log_coef") is not None and log_coef is not None:
            log_coef.copy_(extra["log_coef"])
        if extra and extra.get("lr_kl") is not None and a.target_kl is not None:  # the saved update's lr and KL
            lr_kl = returns.adapt_lr(*extra["lr_kl"], a.target_kl, a.lr / 100, a.lr * 10)

        timer = s.timer
        hist = torch.zeros(env.num_actions, dtype=torch.int64, device=dev)
        ones = torch.ones(a.n_step * n_learn, dtype=torch.int64, device=dev)  # the trained samples' actions
        sums = torch.zeros(len(STAT_NAMES), dtype=torch.float32, device=dev)
        gn_sum = torch.zeros((), dtype=torch.float32, device=dev)
        kl_sum = torch.zeros((), dtype=torch.float32, device=dev)  # minibatches > 1: the trained policy's KL
        clip_sum = torch.zeros((), dtype=torch.float32, device=dev)  # clip: the share of samples clipped
        boot = torch.zeros((n, *obs_shape), dtype=torch.uint8, device=dev) if a.n_step == 1 else None
        if a.n_step > 1:
            t_len = a.n_step
            # the envs that feed the learner: all, or a block of n_learn that moves on by n_learn envs each window
            block = None if n_learn == n else torch.arange(n_learn, device=dev)
            ids = None if n_learn == n else torch.empty(n_learn, dtype=torch.int64, device=dev)
            pick = (lambda x: x) if n_learn == n else (lambda x: x.index_select(0, ids))

            def put(dst, x):  # dst <- x's rows of the learning envs
                return dst.copy_(x) if n_learn == n else torch.index_select(x, 0, ids, out=dst)

            obs_buf = torch.zeros((t_len, n_learn, *obs_shape), dtype=torch.uint8, device=dev)
            final_buf = torch.zeros_like(obs_buf)
            act_buf = torch.zeros((t_len, n_learn), dtype=torch.int64, device=dev)
            logp_buf = torch.zeros((t_len, n_learn), dtype=torch.float32, device=dev)  # the acting policy's
            val_buf = torch.zeros((t_len, n_learn), dtype=torch.float32, device=dev)
            rew_buf = torch.zeros((t_len, n_learn), dtype=torch.float32, device=dev)
            term_buf = torch.zeros((t_len, n_learn), dtype=torch.bool, device=dev)
            trunc_buf = torch.zeros((t_len, n_learn), dtype=torch.bool, device=dev)
        windows_per_step = a.update_every // a.n_step
        windows_per_update = a.steps_per_update // a.n_step

        while s.running:
            lr = returns.linear_lr(a.lr, s.update, s.num_updates, a.anneal_lr) if a.target_kl is None else lr_kl
            for g in optimizer.param_groups:
                g["lr"] = lr
            ent_coef = (returns.linear_schedule(a.ent_coef, a.ent_coef_end, s.update, s.num_updates)
                        if log_coef is None else log_coef.exp())
            coefs = A2CCoefs(a.vf_coef, ent_coef, a.norm_adv, a.clip, a.clip_vloss)
            sums.zero_()
            gn_sum.zero_()
            kl_sum.zero_()
            clip_sum.zero_()
            hist.zero_()
            for k in range(windows_per_update):
                if a.n_step == 1:
                    mark = timer.start("forward")
                    with s.autocast(a.amp):
                        logits, value, new_state = step_fn(env.obs, state)
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    action = dist.sample()
                    logp, ent = dist.log_prob(action), dist.entropy()
                    timer.stop(mark)
                    mark = timer.start("env")
                    _, reward, term, trunc, _ = env.step(action)
                    timer.stop(mark)
                    mark = timer.start("backward")
                    with torch.no_grad(), s.autocast(a.amp):
                        bootstrap_obs(env.obs, env.final_obs, trunc, out=boot)
                        v_next = model.value(boot, None if new_state is None else new_state.detach()).float()
                    target = returns.td_target(reward, term, v_next, a.gamma)
                    loss, m = a2c_loss(logp, ent, value.float(), target, coefs)
                    (loss / a.update_every).backward()
                    if state is not None:  # carried on, reset where the episode ended
                        state = new_state.detach().float() * (~(term | trunc)).unsqueeze(-1).float()
                else:
                    if ids is not None:  # this window's block of learning envs (its start known on the host)
                        torch.add(block, (s.update * windows_per_update + k) * n_learn % n, out=ids).remainder_(n)
                    with torch.no_grad():
                        for t in range(t_len):
                            mark = timer.start("forward")
                            with s.autocast(a.amp):
                                logits, value = model(env.obs)
                            dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                            action = dist.sample()
                            put(obs_buf[t], env.obs)
                            put(act_buf[t], action)
                            put(logp_buf[t], dist.log_prob(action))
                            put(val_buf[t], value.float())
                            timer.stop(mark)
                            mark = timer.start("env")
                            _, reward, term, trunc, _ = env.step(action)
                            put(rew_buf[t], reward), put(term_buf[t], term), put(trunc_buf[t], trunc)
                            put(final_buf[t], env.final_obs)
                            timer.stop(mark)
                    mark = timer.start("backward")
                    with torch.no_grad(), s.autocast(a.amp):
                        last_value = model.value(pick(env.obs)).float()
                        final_values = returns.truncated_values(model.value, final_buf, trunc_buf)  # one sync
                        _, ret = returns.gae(rew_buf, val_buf, term_buf | trunc_buf, last_value, a.gamma,
                                             a.gae_lambda, trunc_buf, final_values)
                    size = t_len * n_learn
                    b_obs, action, b_ret = obs_buf.reshape(size, *obs_shape), act_buf.reshape(-1), ret.reshape(-1)
                    b_logp, b_val = logp_buf.reshape(-1), val_buf.reshape(-1)
                    # the whole window (its gradient accumulated), or an optimizer step on each random share of it
                    parts = [slice(None)] if a.minibatches == 1 else returns.minibatches(size, a.minibatches, sampler,
                                                                                         dev)
                    part_stats = []
                    for mb in parts:
                        with s.autocast(a.amp):
                            logits, value = model(b_obs[mb])
                        dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                        logp = dist.log_prob(action[mb])
                        loss, m = a2c_loss(logp, dist.entropy(), value.float(), b_ret[mb], coefs, b_logp[mb],
                                           b_val[mb])
                        if a.minibatches > 1:  # how far the steps before this one moved the policy from the actor
                            kl_sum.add_(returns.approx_kl(logp.detach() - b_logp[mb]))
                        (loss / windows_per_step).backward()
                        part_stats.append(torch.stack([m[name].float() for name in STAT_NAMES]))
                        if a.clip is not None:
                            clip_sum.add_(m["clipfrac"])
                        if a.minibatches > 1:
                            timer.stop(mark)
                            mark = timer.start("optimizer")
                            gn_sum.add_(s.apply_gradients(model, optimizer, a.max_grad_norm))
                            optimizer.zero_grad(set_to_none=True)
                            timer.stop(mark)
                            mark = timer.start("backward")
                    m = dict(zip(STAT_NAMES, (sum(part_stats) / len(parts)).unbind(0), strict=True))
                sums.add_(torch.stack([m[name].float() for name in STAT_NAMES]))
                hist.index_add_(0, action, ones)
                timer.stop(mark)
                if a.minibatches == 1 and (k + 1) % windows_per_step == 0:
                    mark = timer.start("optimizer")
                    gn_sum.add_(s.apply_gradients(model, optimizer, a.max_grad_norm))
                    optimizer.zero_grad(set_to_none=True)
                    timer.stop(mark)
            mean = sums / windows_per_update
            if log_coef is not None:  # next update's weight, from this one's mean entropy
                adapt_ent_coef(log_coef, mean[STAT_NAMES.index("entropy")], ent_target, a.ent_lr)
            metrics = {"lr": lr, "ent_coef": ent_coef, **dict(zip(STAT_NAMES, mean.unbind(0), strict=True)),
                       "grad_norm": gn_sum / (a.steps_per_update // a.update_every * a.minibatches), "actions": hist}
            if a.minibatches > 1:
                metrics["approx_kl"] = kl_sum / (windows_per_update * a.minibatches)
            if a.clip is not None:
                metrics["clipfrac"] = clip_sum / (windows_per_update * a.minibatches)
            s.end_update(a.steps_per_update * n, metrics, guard=("pg_loss", "v_loss", "grad_norm"))
            if a.target_kl is not None:  # the next update's lr, from this one's KL (on every process alike)
                lr_kl = returns.adapt_lr(lr_kl, s.read["approx_kl"], a.target_kl, a.lr / 100, a.lr * 10)
    return s.summary
