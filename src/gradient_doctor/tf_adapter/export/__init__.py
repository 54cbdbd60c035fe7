"""Exports of a run's series (TensorBoard)."""
