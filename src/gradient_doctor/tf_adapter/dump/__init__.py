"""The crash dump: a failing step written to disk, and read back for `gradient-doctor
replay`.
"""
