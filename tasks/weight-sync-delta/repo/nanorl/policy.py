"""The policy the trainer trains and the rollout ranks sample from."""

import torch
from torch import nn


class TinyPolicy(nn.Module):
    """A token embedding, one hidden layer and a logits head: big enough that a weight sync moves
    real bytes, small enough for a CPU test."""

    def __init__(self, vocab: int = 64, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.body = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(tokens))))

    @torch.no_grad()
    def act(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One sampled next token per row of ``tokens`` (the rollout ranks' job)."""
        logits = self.forward(tokens)[:, -1, :]
        return torch.multinomial(torch.softmax(logits.float(), dim=-1), 1, generator=generator)
