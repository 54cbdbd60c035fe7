"""Where events enter: the Keras callback, the custom-loop wrapper, the patches of
`gradient-doctor run`, the tape and model hooks.
"""
