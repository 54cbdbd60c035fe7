"""Tests of the knowledge base, on hand-built evidence (no TensorFlow)."""
