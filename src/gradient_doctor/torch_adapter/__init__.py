"""The PyTorch adapter: the core's `Adapter` protocol for `torch` training steps.

Its public face is `gradient_doctor.torch.watch`. Modules, one concern each:
`step_check` (the fused finite check of a step's loss and gradients), `guarded_step`
(an optimizer's step, skipped when that check fails), `backward_roots` (the losses
`backward()` was called on), `rng_state` (the random draws of a call, kept for its
replay), `op_names` (aten ops in the core's op vocabulary), `tensor_stats`,
`module_scope` and `source_lines` (what each recorded op is, where it ran), `op_recorder`
(the replay's dispatch mode, writing `OpEvent`s), `gradient_paths` (parameters left
without a gradient, and where their path to the loss breaks), `trial_plans` (what each
fix trial puts in place) and `fix_trials` (the trial runner from the last good state),
`adapter` (`TorchAdapter`) and `watched_step` (the step wrapper that drives the session).

`gradient-doctor run` on an unchanged script: `script_hooks` (every `optimizer.step()`
checked by the global step hooks, a non-finite update skipped), `script_adapter`
(`ScriptAdapter`: updates grouped into steps for the session), `step_rerun` (the seeded
rerun of the script, from a fork taken before it ran), `start_rng` (the generators'
states at the start, as JSON), `step_recording` (the failing step recorded in the rerun)
and `step_events` (its op events as JSON).
"""
