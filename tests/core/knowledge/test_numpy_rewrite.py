"""Lines that leave TensorFlow or PyTorch for NumPy, rewritten in the framework's ops."""

import pytest

from gradient_doctor.core.knowledge.rewrites.numpy_calls import stay_in_tensorflow, stay_in_torch
from gradient_doctor.core.knowledge.source.spelling import tensorflow_name


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        (
            "probs = np.clip(pred.numpy(), EPS, 1.0 - EPS)",
            "probs = tf.clip_by_value(pred, EPS, 1.0 - EPS)",
        ),
        ("x = np.mean(np.exp(a.numpy()), axis=1)", "x = tf.reduce_mean(tf.exp(a), axis=1)"),
        ("loss = tf.constant(my_loss(p, y.numpy()))", "loss = my_loss(p, y)"),
        ("v = tf.convert_to_tensor(np.asarray(h), dtype=tf.float32)", "v = h"),
        ("z = np.polyval(c, q.numpy())", "z = np.polyval(c, q)"),
    ],
)
def test_round_trips_become_tensorflow_ops(code, rewritten):
    assert stay_in_tensorflow(code) == rewritten


def test_a_line_without_numpy_is_left_alone():
    assert stay_in_tensorflow("pred = model(x, training=True)") is None


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        ("h = torch.from_numpy(self.encoder(x).detach().numpy())", "h = self.encoder(x)"),
        ("h = torch.tensor(t.detach().cpu().numpy())", "h = t.cpu()"),
        ("z = torch.as_tensor(np.tanh(t.detach().numpy()), dtype=torch.float32)", "z = np.tanh(t)"),
    ],
)
def test_round_trips_become_torch_ops(code, rewritten):
    assert stay_in_torch(code) == rewritten


def test_a_torch_line_without_numpy_is_left_alone():
    assert stay_in_torch("h = torch.tensor(errors).mean()") is None


@pytest.mark.parametrize(
    ("numpy_name", "name"),
    [("clip", "tf.clip_by_value"), ("log", "tf.math.log"), ("sqrt", "tf.sqrt"), ("polyval", None)],
)
def test_tensorflow_name(numpy_name, name):
    assert tensorflow_name(numpy_name) == name
