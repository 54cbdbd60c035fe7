"""Where events enter: the step `watch` wraps, the optimizer step hooks of `gradient-doctor
run`, the losses `backward()` is called on.
"""
