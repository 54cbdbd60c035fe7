"""Aten op names in the core's op vocabulary, so the same rules diagnose PyTorch's ops."""

from __future__ import annotations

# Aten overload packets (`aten.exp`, `aten.div`, ...) by the op type the knowledge base's
# rules key on. An aten op missing here keeps a CamelCase form of its own name
# (`aten.native_layer_norm` -> "NativeLayerNorm"): no rule claims it, the default one
# explains it.
_VOCABULARY: dict[str, tuple[str, ...]] = {
    "Exp": ("exp", "exp_", "exp2", "exp2_"),
    "Expm1": ("expm1", "expm1_"),
    "Cosh": ("cosh", "cosh_"),
    "Sinh": ("sinh", "sinh_"),
    "Log": ("log", "log_", "log2", "log2_", "log10", "log10_"),
    "Log1p": ("log1p", "log1p_"),
    "Logdet": ("logdet",),
    "Xlogy": ("xlogy", "xlogy_", "special_xlogy"),
    "Sqrt": ("sqrt", "sqrt_"),
    "Rsqrt": ("rsqrt", "rsqrt_"),
    "Pow": ("pow", "pow_", "float_power", "float_power_"),
    "RealDiv": ("div", "div_", "true_divide", "true_divide_"),
    "FloorDiv": ("floor_divide", "floor_divide_"),
    "Reciprocal": ("reciprocal", "reciprocal_"),
    "Acos": ("acos", "acos_", "arccos"),
    "Asin": ("asin", "asin_", "arcsin"),
    "Atanh": ("atanh", "atanh_", "arctanh"),
    "Acosh": ("acosh", "acosh_", "arccosh"),
    "Lgamma": ("lgamma", "lgamma_"),
    "Digamma": ("digamma", "digamma_"),
    "Softmax": ("_softmax", "softmax"),
    "LogSoftmax": ("_log_softmax", "log_softmax"),
    "Sigmoid": ("sigmoid", "sigmoid_"),
    "Tanh": ("tanh", "tanh_"),
    "Relu": ("relu", "relu_"),
    "Softplus": ("softplus",),
    "MatMul": ("mm", "addmm", "matmul", "linear", "_addmm_activation"),
    "BatchMatMulV2": ("bmm", "baddbmm"),
    "Einsum": ("einsum",),
    "Mul": ("mul", "mul_"),
    "AddV2": ("add", "add_"),
    "Sub": ("sub", "sub_", "rsub"),
    "Square": ("square",),
    "Sum": ("sum", "nansum"),
    "Mean": ("mean", "nanmean"),
    "Prod": ("prod",),
    "Max": ("amax", "max"),
    "Min": ("amin", "min"),
    "Cumsum": ("cumsum", "cumsum_"),
    "Conv2D": ("convolution", "_convolution", "conv2d"),
    "EuclideanNorm": ("linalg_vector_norm", "norm"),
    "Logsumexp": ("logsumexp",),
    "Select": ("where",),
    "ArgMax": ("argmax",),
    "ArgMin": ("argmin",),
    "TopKV2": ("topk",),
    "Cast": ("_to_copy",),
    "Item": ("_local_scalar_dense",),
    "OneHot": ("one_hot",),
    "Round": ("round", "round_"),
    "Floor": ("floor", "floor_"),
    "Ceil": ("ceil", "ceil_"),
    "Sign": ("sign", "sign_"),
    "Equal": ("eq", "eq_"),
    "NotEqual": ("ne", "ne_"),
    "Less": ("lt", "lt_"),
    "LessEqual": ("le", "le_"),
    "Greater": ("gt", "gt_"),
    "GreaterEqual": ("ge", "ge_"),
    "Maximum": ("maximum", "clamp_min", "clamp_min_"),
    "Minimum": ("minimum", "clamp_max", "clamp_max_"),
    "ClipByValue": ("clamp", "clamp_", "clip", "clip_"),
    "Neg": ("neg", "neg_"),
    "Abs": ("abs", "abs_"),
    "ScatterAdd": ("scatter_add", "scatter_add_", "index_add", "index_add_"),
    "ScatterReduce": ("scatter_reduce", "scatter_reduce_", "index_reduce", "index_reduce_"),
    "GatherV2": ("index_select", "gather", "embedding"),
    "Multinomial": ("multinomial",),
    "BinaryCrossEntropy": ("binary_cross_entropy",),
    "CtcLoss": ("_ctc_loss", "ctc_loss"),
    "NllLoss": ("nll_loss_forward", "nll_loss2d_forward", "nll_loss", "nll_loss_nd"),
    "BinaryCrossEntropyWithLogits": ("binary_cross_entropy_with_logits",),
}
# Aten ops whose second argument is the dims they reduce or scatter along (an int or a
# list of ints): the recorder notes them as the event's `axes`.
ALONG_DIMS = frozenset(
    {
        *_VOCABULARY["Sum"],
        *_VOCABULARY["Mean"],
        *_VOCABULARY["Prod"],
        *_VOCABULARY["Max"],
        *_VOCABULARY["Min"],
        *_VOCABULARY["Logsumexp"],
        *_VOCABULARY["ScatterAdd"],
        *_VOCABULARY["ScatterReduce"],
    }
)
OP_TYPES: dict[str, str] = {
    aten: op_type for op_type, names in _VOCABULARY.items() for aten in names
}


# A convolution's op type by its weight's rank (one aten op serves 1-d, 2-d and 3-d).
_CONVOLUTIONS = {3: "Conv1D", 4: "Conv2D", 5: "Conv3D"}


def op_type(aten_name: str, weight_rank: int | None = None) -> str:
    """The core's op type for an aten op, by its overload packet's name.

    Args:
        aten_name: str, e.g. "log", "div", "addmm" (`func.overloadpacket.__name__`).
        weight_rank: for a convolution, its weight's (second input's) rank, which
            tells a `Conv1d`'s from a `Conv2d`'s; None when unknown.

    Returns:
        The op type the knowledge base keys on ("Log", "RealDiv", "MatMul"), or the
        aten name in CamelCase when the vocabulary has none.

    Example:
        >>> op_type("div"), op_type("native_layer_norm")
        ('RealDiv', 'NativeLayerNorm')
    """
    known = OP_TYPES.get(aten_name)
    if known == "Conv2D" and weight_rank in _CONVOLUTIONS:
        return _CONVOLUTIONS[weight_rank]
    if known is not None:
        return known
    return "".join(part[:1].upper() + part[1:] for part in aten_name.split("_") if part)
