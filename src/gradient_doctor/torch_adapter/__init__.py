"""The PyTorch adapter: the core's `Adapter` protocol for `torch` training steps.

Its public face is `gradient_doctor.torch.watch`; `gradient-doctor run` drives it on an
unchanged script. Two adapters at the top, one per front end: `adapter` (`TorchAdapter`,
for `watch`, and the `PyTorchAdapter` base both share) and `script_adapter`
(`ScriptAdapter`: a script's updates grouped into steps). The rest by stage:

- `hooks/`: where events enter (`watched_step`, the step `watch` wraps; `script_hooks`,
  the global optimizer step hooks of `gradient-doctor run`; `backward_roots`, the losses
  `backward()` is called on).
- `step/`: what runs every update (`guarded_step`, an optimizer's step skipped when not
  finite; `step_check`, the fused finite check; `rng_state`, the random state kept for
  a replay).
- `localize/`: the replay op by op (`op_recorder`, the dispatch mode writing `OpEvent`s;
  `op_names`, `tensor_stats`, `module_scope`, `source_lines`: what each op is and where
  it ran) and `gradient_paths` (parameters left without a gradient, where their path
  to the loss breaks).
- `rerun/`: the seeded rerun of a script (`step_rerun`, from a fork taken before it ran
  or a fresh interpreter given `start_rng`'s state; `step_recording`, the failing step
  recorded there; `step_events`, its op events as JSON).
- `trials/`: fix trials (`trial_plans`, what each puts in place; `fix_trials`, the
  runner from the last good state).
"""
