"""What runs inside the compiled training step, every step: the guard and its statistics."""
