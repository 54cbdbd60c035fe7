"""The PyTorch crash dump: the failing step's aten ops and the tensors they start from,
written in the seeded rerun, and replayed op by op for `gradient-doctor replay`.
"""
