"""PPO from pixels with the whole loop on the device: rollouts of `rollout_steps` x `num_envs`, GAE with bootstrap
on truncation, minibatch epochs. One file, CleanRL-style; the math is in `loss.py` and `rl/returns.py`, the
shell (run folder, logs, eval, checkpoints, stop rules) in `rl/loop.py`.

    gbxcule train --algo ppo --task leave_house --num-envs 4096 --total-steps 20000000
"""

from __future__ import annotations

import torch

from gbxcule.rl import returns
from gbxcule.rl.algos.ppo import build_model, steps_per_update
from gbxcule.rl.algos.ppo import loss as ppo
from gbxcule.rl.loop import Session
from gbxcule.rl.shell import NonFiniteError


def rollout_bytes(cfg, obs_bytes: int) -> int:
    """Device bytes of the rollout storage: observations twice (the obs and the finished episodes' last obs,
    for truncation bootstraps), plus actions, log-probs, values, rewards, flags, advantages, returns."""
    t, n = cfg.ppo.rollout_steps, cfg.env.num_envs
    return t * n * (2 * obs_bytes + 8 + 4 * 6 + 2)


def train(cfg, checkpoint: dict | None = None, echo=None) -> dict:
    """Train (or continue from `checkpoint`) in cfg.run.run_dir; returns the summary."""
    p = cfg.ppo
    with Session(cfg, checkpoint, echo, device_bytes=lambda ob: rollout_bytes(cfg, ob),
                 steps_per_update=steps_per_update(cfg)) as s:
        env = s.env
        model = build_model(p, env.num_actions, env.stack_k, env.obs_mode == "packed").to(s.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=p.lr, eps=1e-5)
        fwd = torch.compile(model) if p.compile else model
        learner = s.wrap(model)  # DDP over the model with run.grad_sync = "ddp" on several processes
        train_fwd = fwd if learner is model else (torch.compile(learner) if p.compile else learner)
        sampler = torch.Generator().manual_seed(cfg.run.seed)
        extra = s.start(model, optimizer, state=lambda: {"sampler": sampler.get_state()},
                        describe=f"rollout storage {s.storage_bytes / 2**20:,.0f} MiB on {s.device}; {s.num_updates} "
                                 f"updates of {s.update_steps:,} env-steps; model "
                                 f"{model.describe()['params']:,} parameters")
        if extra:
            sampler.set_state(extra["sampler"])

        t_len, n, dev, obs_shape = p.rollout_steps, env.num_envs, env.device, env.single_obs_shape
        obs_buf = torch.zeros((t_len, n, *obs_shape), dtype=torch.uint8, device=dev)
        final_buf = torch.zeros_like(obs_buf)
        act_buf = torch.zeros((t_len, n), dtype=torch.int64, device=dev)
        logp_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        val_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        rew_buf = torch.zeros((t_len, n), dtype=torch.float32, device=dev)
        term_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
        trunc_buf = torch.zeros((t_len, n), dtype=torch.bool, device=dev)
        coefs = ppo.LossCoefs(p.clip, p.vf_coef, p.ent_coef, p.clip_vloss)
        timer = s.timer

        while s.running:
            lr = returns.linear_lr(p.lr, s.update, s.num_updates, p.anneal_lr)
            for g in optimizer.param_groups:
                g["lr"] = lr
            for t in range(t_len):
                mark = timer.start("inference")
                obs_buf[t].copy_(env.obs)
                with torch.no_grad(), s.autocast(p.amp):
                    logits, value = fwd(obs_buf[t])
                dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                action = dist.sample()
                act_buf[t] = action
                logp_buf[t] = dist.log_prob(action)
                val_buf[t] = value.float()
                timer.stop(mark)
                mark = timer.start("env")
                _, reward, term, trunc, _ = env.step(action)
                rew_buf[t] = reward
                term_buf[t] = term
                trunc_buf[t] = trunc
                final_buf[t].copy_(env.final_obs)
                timer.stop(mark)
            mark = timer.start("update")
            with torch.no_grad(), s.autocast(p.amp):
                last_value = model.value(env.obs).float()
                final_values = returns.truncated_values(model.value, final_buf, trunc_buf)  # one sync an update
                dones = term_buf | trunc_buf
                adv, ret = returns.gae(rew_buf, val_buf, dones, last_value, p.gamma, p.gae_lambda, trunc_buf,
                                       final_values)
            b_obs = obs_buf.reshape(t_len * n, *obs_shape)
            b_act, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
            b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
            stats = []
            for _epoch in range(p.epochs):
                for mb in returns.minibatches(steps_per_update(cfg), p.minibatches, sampler, dev):
                    with s.autocast(p.amp):
                        logits, new_v = train_fwd(b_obs[mb])
                    dist = torch.distributions.Categorical(logits=logits.float(), validate_args=False)
                    a = b_adv[mb]
                    if p.norm_adv:
                        a = ppo.normalize(a)
                    loss, m = ppo.ppo_loss(dist.log_prob(b_act[mb]), b_logp[mb], a, new_v.float(), b_val[mb],
                                           b_ret[mb], dist.entropy(), coefs)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    m["grad_norm"] = s.apply_gradients(model, optimizer, p.max_grad_norm)
                    m["loss"] = loss.detach()
                    stats.append(torch.stack([v.float() for v in m.values()]))
                    names = list(m)
                epoch_stats = s.all_mean(torch.stack(stats).mean(0))  # every process takes the same decision
                if not bool(torch.isfinite(epoch_stats).all()):  # once per epoch
                    raise NonFiniteError(dict(zip(names, epoch_stats.tolist(), strict=True)))
                if p.target_kl is not None and float(epoch_stats[names.index("approx_kl")]) > p.target_kl:
                    break
            timer.stop(mark)
            mean = torch.stack(stats).mean(0)
            metrics = {"lr": lr, **dict(zip(names, mean.unbind(0), strict=True)),
                       "explained_variance": returns.explained_variance(b_val, b_ret),
                       "value_mean": b_val.mean(), "value_std": b_val.std(), "adv_mean": b_adv.mean(),
                       "adv_std": b_adv.std(), "actions": torch.bincount(b_act, minlength=env.num_actions)}
            s.end_update(t_len * n, metrics, guard=names)
    return s.summary
