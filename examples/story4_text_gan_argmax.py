"""RDF-triple-to-text GAN whose generator gets `None` gradients for every variable.

Story 4 of gradient-doctor: a small transformer generator turns an RDF triple
(subject, predicate, object: 3 tokens) into an 8-token text. A discriminator with two
inputs, the triple and a text, each with its own embedding and transformer block,
concatenates the two pooled encodings and classifies the pair as real or generated.
The adversarial loop has two tapes (`gen_tape`, `disc_tape`) in a `tf.function`
train step, binary cross-entropy losses as in the DCGAN tutorial, then
`d_optimizer.apply_gradients(...)` and `g_optimizer.apply_gradients(...)`.

The generator emits its text as tokens, `tf.argmax(gen_logits, axis=-1)`, and the
discriminator embeds those integer tokens. ArgMax has no gradient (its output is an
integer index), so no path leads from the discriminator's verdict back to any of the
generator's 29 trainable variables (token and position embeddings, encoder block,
learned text queries, decoder block, vocabulary projection): `gen_tape.gradient`
returns 29 `None`s. The discriminator's 30 variables get gradients. `tape.watch`,
`watch_accessed_variables=False`, nesting or reordering the tapes, a persistent tape,
or moving the loop into `model.fit` all leave the argmax in place, so none can help.

Run plainly, the first call of `train_step` fails while it is traced, in the
generator's `apply_gradients`, with Keras's
`ValueError: No gradients provided for any variable.` (no step runs; the crash is
expected: it is the story's error).

Expected: category=disconnected_gradients variables=29 all=true op=ArgMax
line="generated_text = tf.argmax(gen_logits, axis=-1)"
"""

import keras
import numpy as np
import tensorflow as tf

VOCAB = 40
TRIPLE_LEN = 3
TEXT_LEN = 8
NUM_PAIRS = 512
D_MODEL = 16
NUM_HEADS = 2
BATCH_SIZE = 32
ADVERSARIAL_EPOCHS = 2


def make_corpus(rng):
    """Synthetic triples and the texts that verbalise them (token 0 is padding)."""
    triples = rng.integers(1, VOCAB, size=(NUM_PAIRS, TRIPLE_LEN))
    # A fixed "template": each text mentions subject, predicate and object in order,
    # with filler words around them.
    fillers = rng.integers(1, VOCAB, size=(NUM_PAIRS, TEXT_LEN))
    texts = fillers.copy()
    texts[:, 0] = triples[:, 0]
    texts[:, 3] = triples[:, 1]
    texts[:, 6] = triples[:, 2]
    return triples.astype("int32"), texts.astype("int32")


class PositionalEmbedding(keras.layers.Layer):
    """Token embedding plus a learned position embedding."""

    def __init__(self, length, **kwargs):
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(VOCAB, D_MODEL)
        self.positions = keras.layers.Embedding(length, D_MODEL)
        self.length = length

    def call(self, ids):
        return self.tokens(ids) + self.positions(tf.range(self.length))


class TransformerBlock(keras.layers.Layer):
    """Post-norm attention block; attends to `context` (self-attention by default)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(NUM_HEADS, D_MODEL // NUM_HEADS)
        self.ffn = keras.layers.Dense(D_MODEL, activation="relu")
        self.norm = keras.layers.LayerNormalization()

    def call(self, x, context=None):
        context = x if context is None else context
        x = x + self.attention(x, context)
        return self.norm(x + self.ffn(x))


class TextQueries(keras.layers.Layer):
    """One learned query vector per output position of the decoder."""

    def build(self, input_shape):
        self.queries = self.add_weight(shape=(TEXT_LEN, D_MODEL), name="queries")

    def call(self, encoded):
        batch = tf.shape(encoded)[0]
        return tf.tile(self.queries[None], [batch, 1, 1])


def build_generator():
    triple = keras.Input((TRIPLE_LEN,), dtype="int32", name="triple")
    encoded = PositionalEmbedding(TRIPLE_LEN, name="triple_embedding")(triple)
    encoded = TransformerBlock(name="encoder")(encoded)
    queries = TextQueries(name="text_queries")(encoded)
    decoded = TransformerBlock(name="decoder")(queries, context=encoded)
    logits = keras.layers.Dense(VOCAB, name="vocab_logits")(decoded)
    return keras.Model(triple, logits, name="generator")


def build_discriminator():
    triple = keras.Input((TRIPLE_LEN,), dtype="int32", name="triple")
    text = keras.Input((TEXT_LEN,), dtype="int32", name="text")
    triple_h = PositionalEmbedding(TRIPLE_LEN, name="triple_embedding")(triple)
    triple_h = TransformerBlock(name="triple_block")(triple_h)
    text_h = PositionalEmbedding(TEXT_LEN, name="text_embedding")(text)
    text_h = TransformerBlock(name="text_block")(text_h)
    pooled = keras.layers.Concatenate()(
        [
            keras.layers.GlobalAveragePooling1D()(triple_h),
            keras.layers.GlobalAveragePooling1D()(text_h),
        ]
    )
    verdict = keras.layers.Dense(1, activation="sigmoid", name="real_or_fake")(pooled)
    return keras.Model([triple, text], verdict, name="discriminator")


cross_entropy = keras.losses.BinaryCrossentropy()


def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    return real_loss + fake_loss


def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)


def main():
    keras.utils.set_random_seed(4)
    triples, texts = make_corpus(np.random.default_rng(4))
    generator = build_generator()
    discriminator = build_discriminator()
    print("generator trainable variables:", len(generator.trainable_variables))

    g_optimizer = keras.optimizers.Adam(1e-4)
    d_optimizer = keras.optimizers.Adam(1e-4)

    @tf.function
    def train_step(triple_batch, text_batch):
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            gen_logits = generator(triple_batch, training=True)
            generated_text = tf.argmax(gen_logits, axis=-1)
            real_output = discriminator([triple_batch, text_batch], training=True)
            fake_output = discriminator([triple_batch, generated_text], training=True)
            gen_loss = generator_loss(fake_output)
            disc_loss = discriminator_loss(real_output, fake_output)
        gen_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
        disc_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
        d_optimizer.apply_gradients(zip(disc_grads, discriminator.trainable_variables))
        g_optimizer.apply_gradients(zip(gen_grads, generator.trainable_variables))
        return gen_loss, disc_loss

    dataset = (
        tf.data.Dataset.from_tensor_slices((triples, texts))
        .shuffle(NUM_PAIRS, seed=4)
        .batch(BATCH_SIZE, drop_remainder=True)
    )
    for epoch in range(ADVERSARIAL_EPOCHS):
        for triple_batch, text_batch in dataset:
            gen_loss, disc_loss = train_step(triple_batch, text_batch)
        print(f"epoch {epoch}: gen_loss={float(gen_loss):.4f} disc_loss={float(disc_loss):.4f}")


if __name__ == "__main__":
    main()
