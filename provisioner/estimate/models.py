"""Transformer shapes for the models `estimate` knows, and their parameter counts.

Shapes are the published Llama 3 / 3.1 configurations (Meta's model cards and the Llama 3
paper, Table 3): grouped-query attention, SwiGLU MLP, untied input and output embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def params(self) -> int:
        """Parameter count: embeddings and output head, attention, SwiGLU MLP, norms."""
        head_dim = self.hidden // self.heads
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        mlp = 3 * self.hidden * self.ffn
        per_layer = attention + mlp + 2 * self.hidden
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden


MODELS = {
    "8b": Model("Llama 3 8B", 32, 4096, 32, 8, 14336, 128256),
    "70b": Model("Llama 3 70B", 80, 8192, 64, 8, 28672, 128256),
    "405b": Model("Llama 3.1 405B", 126, 16384, 128, 8, 53248, 128256),
}
