"""An RDF-triple-to-text GAN whose generator never trains: every `.grad` of it stays None.

Story 4 of gradient-doctor, in PyTorch: a small transformer generator turns an RDF
triple (subject, predicate, object: 3 token ids) into an 8-token text; a
discriminator with two inputs, the triple and a text, each with its own embedding and
encoder layer, concatenates the two pooled encodings and says whether the pair is
real. The loop is the DCGAN tutorial's: the discriminator steps on real and detached
fake texts with `BCEWithLogitsLoss`, then the generator steps to fool it.

The generator emits its text as tokens, `gen_logits.argmax(dim=-1)`, and the
discriminator embeds those integer ids. `argmax` has no gradient, so no path leads
from the discriminator's verdict back to any generator parameter: after
`g_loss.backward()` every `.grad` of the generator is None, and PyTorch raises
nothing: `g_opt.step()` skips them all, and the generator's loss never improves.
`requires_grad_()`, `retain_graph=True` or `zero_grad(set_to_none=False)` leave the
argmax in place, so none can help.

The doctor should find: disconnected_gradients for all of the generator's parameters
(the discriminator's are not flagged), the path broken at `ArgMax` on the
`tokens = gen_logits.argmax(dim=-1)` line, at step 0; training stops there. The fixes:
soft one-hot embeddings, `F.gumbel_softmax(hard=True)`, straight-through, REINFORCE.
"""

import torch
from torch import nn

VOCAB = 40
TRIPLE_LEN, TEXT_LEN = 3, 8
DIM = 32
BATCH_SIZE = 16
STEPS = 200


class Generator(nn.Module):
    """Triple -> logits over the vocabulary for each of the text's positions."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.position = nn.Parameter(torch.randn(TRIPLE_LEN, DIM) * 0.02)
        self.encoder = nn.TransformerEncoderLayer(DIM, 4, 64, dropout=0.0, batch_first=True)
        self.queries = nn.Parameter(torch.randn(TEXT_LEN, DIM) * 0.02)
        self.decoder = nn.TransformerDecoderLayer(DIM, 4, 64, dropout=0.0, batch_first=True)
        self.to_vocab = nn.Linear(DIM, VOCAB)

    def forward(self, triple):
        memory = self.encoder(self.embed(triple) + self.position)
        queries = self.queries.expand(triple.shape[0], -1, -1)
        return self.to_vocab(self.decoder(queries, memory))


class Discriminator(nn.Module):
    """(triple, text) -> a logit: is this text the triple's real one?"""

    def __init__(self):
        super().__init__()
        self.triple_embed = nn.Embedding(VOCAB, DIM)
        self.text_embed = nn.Embedding(VOCAB, DIM)
        self.triple_encoder = nn.TransformerEncoderLayer(DIM, 4, 64, dropout=0.0, batch_first=True)
        self.text_encoder = nn.TransformerEncoderLayer(DIM, 4, 64, dropout=0.0, batch_first=True)
        self.classify = nn.Linear(2 * DIM, 1)

    def forward(self, triple, text):
        a = self.triple_encoder(self.triple_embed(triple)).mean(dim=1)
        b = self.text_encoder(self.text_embed(text)).mean(dim=1)
        return self.classify(torch.cat([a, b], dim=1))


def real_pairs(generator):
    """Triples and their 'real' texts: the triple's tokens spelled out with fillers."""
    triple = torch.randint(0, VOCAB, (BATCH_SIZE, TRIPLE_LEN), generator=generator)
    filler = torch.randint(0, VOCAB, (BATCH_SIZE, TEXT_LEN - TRIPLE_LEN), generator=generator)
    return triple, torch.cat([triple, filler], dim=1)


def main():
    torch.manual_seed(0)
    data = torch.Generator().manual_seed(0)
    gen, disc = Generator(), Discriminator()
    g_opt = torch.optim.Adam(gen.parameters(), lr=1e-4)
    d_opt = torch.optim.Adam(disc.parameters(), lr=1e-4)
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(BATCH_SIZE, 1), torch.zeros(BATCH_SIZE, 1)
    for step in range(STEPS):
        triple, text = real_pairs(data)
        gen_logits = gen(triple)
        tokens = gen_logits.argmax(dim=-1)  # the generated text, as token ids
        d_loss = bce(disc(triple, text), ones) + bce(disc(triple, tokens.detach()), zeros)
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = bce(disc(triple, tokens), ones)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        if step % 20 == 0:
            print(f"step {step}: d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}")


if __name__ == "__main__":
    main()
