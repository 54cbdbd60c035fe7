"""Multi-task churn model whose auxiliary head is built but never used: it never trains.

The user subclasses `keras.Model` for a planned multi-task model: a shared body, a churn
head and an auxiliary "tenure" head. `build()` builds every layer (so the summary and the
weight count look complete), but `call()` was only half updated: it returns the churn
head's output and never calls `self.tenure_head`. The model's output does not depend on
the tenure head at all, so its 2 trainable variables (kernel and bias) get `None`
gradients on every step, while the body and the churn head (6 variables) train normally.

Run plainly, `model.fit` trains for 4 epochs and Keras only warns once, while the train
step is traced: `UserWarning: Gradients do not exist for variables
['churn_model/tenure_head/kernel', 'churn_model/tenure_head/bias'] when minimizing the
loss. If using `model.compile()`, did you forget to provide a `loss` argument?`

Expected: category=disconnected_gradients variables=2 all=false op=none (no op: the
model output does not depend on the layer, which is never called)
line='self.tenure_head = keras.layers.Dense(1, name="tenure_head")'
"""

import keras
import numpy as np

NUM_CUSTOMERS = 2048
NUM_FEATURES = 12
BATCH_SIZE = 64
EPOCHS = 4


def make_customers(rng):
    """Usage features and a churn label."""
    x = rng.normal(size=(NUM_CUSTOMERS, NUM_FEATURES)).astype("float32")
    score = x[:, 0] - 0.7 * x[:, 1] + 0.5 * x[:, 2] * x[:, 3]
    churn = (score + 0.5 * rng.normal(size=NUM_CUSTOMERS) > 0.5).astype("float32")
    return x, churn[:, None]


class ChurnModel(keras.Model):
    """Shared body with a churn head and an auxiliary tenure head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body_1 = keras.layers.Dense(32, activation="relu", name="body_1")
        self.body_2 = keras.layers.Dense(16, activation="relu", name="body_2")
        self.churn_head = keras.layers.Dense(1, activation="sigmoid", name="churn_head")
        # Months until the customer leaves: for the multi-task version, coming soon.
        self.tenure_head = keras.layers.Dense(1, name="tenure_head")

    def build(self, input_shape):
        self.body_1.build(input_shape)
        self.body_2.build((None, 32))
        self.churn_head.build((None, 16))
        self.tenure_head.build((None, 16))

    def call(self, features):
        h = self.body_2(self.body_1(features))
        return self.churn_head(h)


def main():
    keras.utils.set_random_seed(6)
    x, churn = make_customers(np.random.default_rng(6))
    model = ChurnModel()
    model.build((None, NUM_FEATURES))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"]
    )
    history = model.fit(x, churn, batch_size=BATCH_SIZE, epochs=EPOCHS, verbose=2)
    print("final accuracy:", history.history["accuracy"][-1])


if __name__ == "__main__":
    main()
