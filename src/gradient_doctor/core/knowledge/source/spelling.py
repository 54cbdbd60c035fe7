"""How each array namespace (TensorFlow, keras.ops, numpy, torch) spells the helpers fixes use."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from string import Formatter

from gradient_doctor.core.knowledge.source.calls import Call
from gradient_doctor.core.knowledge.source.syntax_edit import module_alias

# "{p}" stands for the user's own prefix, e.g. "keras.ops." or "ops.".
_SPELLINGS = {
    "tf": {
        "max": "tf.reduce_max",
        "min": "tf.reduce_min",
        "mean": "tf.reduce_mean",
        "sum": "tf.reduce_sum",
        "softmax": "tf.nn.softmax",
        "logsumexp": "tf.reduce_logsumexp",
        "clip": "tf.clip_by_value",
        "divide_no_nan": "tf.math.divide_no_nan",
        "log": "tf.math.log",
        "l2_normalize": "tf.math.l2_normalize",
        "sigmoid": "tf.math.sigmoid",
        "softplus": "tf.math.softplus",
    },
    "keras": {
        **{
            name: "{p}" + name
            for name in (
                "max",
                "min",
                "mean",
                "sum",
                "softmax",
                "logsumexp",
                "clip",
                "divide_no_nan",
                "log",
                "sigmoid",
                "softplus",
            )
        },
        "l2_normalize": "{p}normalize",
    },
    "np": {
        "max": "np.max",
        "min": "np.min",
        "mean": "np.mean",
        "sum": "np.sum",
        "softmax": "scipy.special.softmax",
        "logsumexp": "scipy.special.logsumexp",
        "clip": "np.clip",
        "log": "np.log",
        "sigmoid": "scipy.special.expit",
    },
    # PyTorch: `torch.maximum` takes two tensors, a bound is `clamp_min`; no helper of
    # PyTorch's is spelled TensorFlow's way, so none falls back to it (`spell`).
    "torch": {
        "max": "torch.amax",
        "min": "torch.amin",
        "mean": "torch.mean",
        "sum": "torch.sum",
        "softmax": "torch.softmax",
        "logsumexp": "torch.logsumexp",
        "clip": "torch.clamp",
        "maximum": "torch.clamp_min",
        "minimum": "torch.clamp_max",
        "log": "torch.log",
        "sigmoid": "torch.sigmoid",
        "softplus": "torch.nn.functional.softplus",
        "l2_normalize": "torch.nn.functional.normalize",
    },
}
# The prefixes of PyTorch's own namespaces (`import torch.nn.functional as F`).
_TORCH_PREFIXES = ("torch.", "F.", "nn.functional.")
# NumPy functions that TensorFlow spells the same way under `tf.`.
_SAME_IN_TF = frozenset(
    {"exp", "sqrt", "square", "abs", "tanh", "maximum", "minimum", "where", "matmul", "stack"}
)


def spell(call: Call | None, helper: str, framework: str = "tf") -> str:
    """Spell a helper ("max", "sum", "clip", "sqrt", ...) the way the user's code does.

    Code that calls `keras.ops.*` gets `keras.ops.*` helpers, numpy code numpy's and
    `torch.*` code torch's; anything else (`tf.*`, `tf.math.*`, `K.*`, unparsed lines)
    gets TensorFlow's. Helpers named alike everywhere ("sqrt", "where", "ones_like")
    take the namespace's prefix (`torch.` for any of PyTorch's).

    Args:
        call: the user's call the fix rewrites, or None when the line did not parse.
        helper: the helper's generic name.
        framework: the framework the user trains with ("tf" or "torch"): a call
            written in no namespace of its own (a tensor's method, `s.exp()`) is
            spelled in it.

    Returns:
        The helper's full name, e.g. "tf.reduce_max" or "keras.ops.max".
    """
    family = namespace(call, framework)
    prefix = {"tf": "tf.", "torch": "torch."}.get(family) or call.prefix
    spelled = _SPELLINGS[family].get(helper)
    if spelled is None and family != "torch":
        spelled = _SPELLINGS["tf"].get(helper)
    if spelled is None:
        return prefix + helper
    return spelled.replace("{p}", prefix)


def namespace(call: Call | None, framework: str = "tf") -> str:
    """The array namespace the user's call is written in: "keras", "np", "torch" or "tf".

    `keras.ops.*` (and any `ops.*`) is "keras", `np.*` and `numpy.*` are "np",
    `torch.*` and `F.*` (`torch.nn.functional`) are "torch"; anything else (`tf.*`,
    `tf.math.*`, `K.*`, a tensor's method, an unparsed line) is "tf", or "torch" when
    `framework` is "torch" (a PyTorch tensor's method, `scores.exp()`).
    """
    prefix = call.prefix if call is not None else ""
    if "ops." in prefix:
        return "keras"
    if prefix.startswith(_TORCH_PREFIXES) or framework == "torch":
        return "torch" if not prefix.startswith(("np.", "numpy.")) else "np"
    return "np" if prefix in ("np.", "numpy.") else "tf"


def reduce_keywords(call: Call | None, framework: str = "tf") -> tuple[str, str]:
    """The keywords a reduction takes for its axis and for keeping it: PyTorch's
    ("dim", "keepdim") for a PyTorch call, ("axis", "keepdims") elsewhere."""
    return ("dim", "keepdim") if namespace(call, framework) == "torch" else ("axis", "keepdims")


def fill(template: str, call: Call | None, arg: str, framework: str = "tf") -> str:
    """Fill a guard template such as "{clip}({arg}, 1e-7, 1.0)" for the user's call.

    Args:
        template: str, with "{arg}" for the argument and "{helper}" for each helper.
        call: the user's call, which decides the namespace (see `spell`).
        arg: str, the argument's text.
        framework: the framework the user trains with (see `spell`).

    Returns:
        The filled template, e.g. "tf.clip_by_value(p, 1e-7, 1.0)".
    """
    helpers = {field for _, field, _, _ in Formatter().parse(template) if field}
    names = {helper: spell(call, helper, framework) for helper in helpers - {"arg"}}
    return template.format(arg=arg, **names)


def tensorflow_name(numpy_name: str) -> str | None:
    """The TensorFlow function that does what a NumPy one does, or None when none is known.

    Args:
        numpy_name: str, the NumPy function's name without its prefix, e.g. "clip".

    Returns:
        The TensorFlow name, e.g. "tf.clip_by_value" for "clip", "tf.exp" for "exp".
    """
    for helper, spelled in _SPELLINGS["np"].items():
        if spelled == f"np.{numpy_name}":
            return _SPELLINGS["tf"].get(helper, f"tf.{helper}")
    return f"tf.{numpy_name}" if numpy_name in _SAME_IN_TF else None


# A TensorFlow name in a rewrite: `tf.` followed by a dotted name.
_TF_NAME = re.compile(r"\btf\.((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)")


def in_files_names(rewrite: Sequence[str], file_lines: Sequence[str]) -> tuple[str, ...]:
    """The rewrite's lines with its TensorFlow names spelled as the user's file can say
    them: a file that imports `keras` (or `from keras import ops`) and not TensorFlow
    gets `keras.ops` helpers (`tf.math.divide_no_nan` -> `ops.divide_no_nan`), one that
    imports TensorFlow under another name gets that name; unchanged otherwise (a file
    that does not parse, or that says `tf` itself). A patch that said `tf` in a file
    without it would fail with a NameError when applied."""
    try:
        tree = ast.parse("".join(file_lines))
    except (SyntaxError, ValueError):
        return tuple(rewrite)
    tensorflow = module_alias(tree, "tensorflow")
    if tensorflow == "tf" or "tf" in _imported_names(tree):  # `import tensorflow.compat.v1 as tf`
        return tuple(rewrite)
    if tensorflow is not None:
        return tuple(
            _TF_NAME.sub(lambda match: f"{tensorflow}.{match.group(1)}", line) for line in rewrite
        )
    prefix = _keras_ops_prefix(tree)
    if prefix is None:
        return tuple(rewrite)
    keras_names = {
        spelled: _SPELLINGS["keras"][helper].replace("{p}", prefix)
        for helper, spelled in _SPELLINGS["tf"].items()
        if helper in _SPELLINGS["keras"]
    }
    keras_names.update({f"tf.{name}": f"{prefix}{name}" for name in _SAME_IN_TF})

    def respelled(match: re.Match) -> str:
        return keras_names.get(match.group(0), match.group(0))

    return tuple(_TF_NAME.sub(respelled, line) for line in rewrite)


def _imported_names(tree: ast.Module) -> set[str]:
    """The names the file's imports bind."""
    return {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def _keras_ops_prefix(tree: ast.Module) -> str | None:
    """How the file names `keras.ops`: "ops." (`from keras import ops`), "keras.ops."
    (`import keras`), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "keras":
            for alias in node.names:
                if alias.name == "ops":
                    return f"{alias.asname or alias.name}."
    keras = module_alias(tree, "keras")
    return f"{keras}.ops." if keras is not None else None
