"""A hand-written softmax in PyTorch overflows: the max-shift is spelled in torch over the dim
the recorded sum reduced (or per segment of an `index_add_` sum), its trial in the watch
decorator verifies it, and no fix of a torch finding is spelled in Keras or TensorFlow."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from tests.torch_adapter.conftest import run_until_stopped  # noqa: E402

nn = torch.nn


class LastDimAttention(nn.Module):
    """Attention weights normalised over the keys, the last dim."""

    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(1, 2) * 6.0
        weights = torch.exp(scores)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return self.out((weights @ self.v(x)).mean(dim=1))


class MiddleDimPooling(nn.Module):
    """Scores of shape [batch, items, heads] normalised over the items, the middle dim."""

    def __init__(self, d=8, heads=3):
        super().__init__()
        self.score = nn.Linear(d, heads)
        self.out = nn.Linear(heads * d, 1)

    def forward(self, x):
        logits = self.score(x) * 40.0
        e = torch.exp(logits)
        attn = e / torch.sum(e, 1, keepdim=True)
        pooled = torch.einsum("bnh,bnd->bhd", attn, x)
        return self.out(pooled.flatten(1))


class EdgeSoftmax(nn.Module):
    """A graph layer: each edge's weight normalised over the edges into its node."""

    def __init__(self, d=8):
        super().__init__()
        self.att = nn.Linear(2 * d, 1)
        self.out = nn.Linear(d, 1)

    def forward(self, h, src, dst):
        s = self.att(torch.cat([h[src], h[dst]], dim=1)).squeeze(1) * 300.0
        e = torch.exp(s)
        denom = torch.zeros(h.shape[0]).index_add_(0, dst, e)
        alpha = e / denom[dst]
        agg = torch.zeros_like(h).index_add_(0, dst, alpha[:, None] * h[src])
        return self.out(agg).mean()


def _attention_run(model, shape, seed):
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    x, y = torch.randn(*shape) * 3, torch.randn(shape[0], 1)

    def step(xb, yb):
        optimizer.zero_grad()
        loss = ((model(xb) - yb) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss

    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    return run_until_stopped(watched, [(x, y)] * 5)


def _shift(finding):
    (fix,) = [fix for fix in finding.fixes if fix.family == "stable_softmax"]
    return fix


def _no_keras_or_tf(finding):
    for fix in finding.fixes:
        assert "keras" not in fix.code and "tf." not in fix.code, (fix.family, fix.code)


def test_the_shift_over_the_last_dim_is_torch_and_verified():
    torch.manual_seed(0)
    finding, _ = _attention_run(LastDimAttention(), (16, 6, 8), seed=0)
    assert finding is not None and finding.origin.op == "Exp"
    fix = _shift(finding)
    assert fix.rewrite == (
        "weights = torch.exp(scores - torch.amax(scores, dim=-1, keepdim=True))",
    )
    assert fix.verified is True, fix.evidence
    _no_keras_or_tf(finding)
    families = {fix.family for fix in finding.fixes}
    assert {"constrain_weights", "normalize_input"} <= families
    (bound,) = [fix for fix in finding.fixes if fix.family == "constrain_weights"]
    assert "renorm_(2, 0, 3.0)" in bound.code


def test_the_shift_follows_the_middle_dim_the_sum_reduced():
    torch.manual_seed(1)
    finding, _ = _attention_run(MiddleDimPooling(), (16, 5, 8), seed=1)
    assert finding is not None and finding.origin.op == "Exp"
    fix = _shift(finding)
    assert fix.rewrite == ("e = torch.exp(logits - torch.amax(logits, dim=1, keepdim=True))",)
    assert "Its values are then summed along axis 1" in finding.explanation
    assert fix.verified is True, fix.evidence
    _no_keras_or_tf(finding)


def test_a_segment_softmax_over_index_add_is_shifted_per_segment():
    torch.manual_seed(2)
    nodes, edges = 6, 14
    model = EdgeSoftmax()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    h = torch.randn(nodes, 8) * 3
    src, dst = torch.randint(0, nodes, (edges,)), torch.randint(0, nodes, (edges,))

    def step(h, src, dst):
        optimizer.zero_grad()
        loss = model(h, src, dst) ** 2
        loss.backward()
        optimizer.step()
        return loss

    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, _ = run_until_stopped(watched, [(h, src, dst)] * 5)
    assert finding is not None and finding.origin.op == "Exp"
    fix = _shift(finding)
    assert "per segment of `dst`" in finding.explanation
    (line,) = fix.rewrite
    assert line.startswith("e = torch.exp(s - s.new_full((h.shape[0], *s.shape[1:])")
    assert '.scatter_reduce(0, dst, s.detach(), "amax")[dst])' in line
    assert "gradient_doctor.torch.ops.stable_segment_softmax(s, dst, h.shape[0])" in fix.code
    assert fix.verified is True, fix.evidence
    _no_keras_or_tf(finding)


def test_tensorflow_findings_keep_keras_spellings():
    from gradient_doctor.core.evidence import TrainingSetup
    from gradient_doctor.core.findings import Origin
    from gradient_doctor.core.knowledge.remedies import fixes as remedies

    origin = Origin("Exp", "dense/Exp", "dense", None, None, (), ())
    tf_setup, torch_setup = (
        TrainingSetup(learning_rate=0.5),
        TrainingSetup(learning_rate=0.5, framework="torch", optimizer="SGD"),
    )
    assert "keras.constraints.MaxNorm" in remedies.constrain_weights(origin, "dense").code
    assert "keras.layers.Normalization" in remedies.normalize_input().code
    assert (
        "keras.optimizers.Adam(learning_rate=0.05)" in remedies.lower_learning_rate(tf_setup).code
    )
    torch_fixes = [
        remedies.constrain_weights(origin, "dense", "torch"),
        remedies.normalize_input("torch"),
        remedies.batch_normalization("each hidden layer", "torch"),
        remedies.better_init("torch"),
        remedies.lower_learning_rate(torch_setup),
        remedies.gradient_clipping(torch_setup),
        remedies.float32_island("y = torch.exp(x)", ("exp",), None, "torch"),
        remedies.float32_island("", ("exp",), None, "torch"),
        remedies.loss_scaling("torch"),
        remedies.activation_change("leaky_relu", "why", "torch"),
    ]
    for fix in torch_fixes:
        assert "keras" not in fix.code and "tf." not in fix.code, (fix.family, fix.code)
    assert "torch.optim.SGD(model.parameters(), lr=0.05)" in torch_fixes[4].code
    assert "clip_grad_norm_(model.parameters(), max_norm=1.0)" in torch_fixes[5].code
    assert torch_fixes[6].rewrite == ("y = torch.exp(x.float())",)
