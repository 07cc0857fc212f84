"""kdp's reference transformers as a PyTorch user builds them from their
descriptions in kdp/nn/transformer.hpp alone (for the tests that load kdp's
parameters into them by name)."""
import torch

nn = torch.nn


class ViT(nn.Module):
    """nn::VisionTransformer."""

    def __init__(self, channels, size, patch, dim, depth, heads, mlp, classes, dropout=0.0):
        super().__init__()
        self.patch_embed = nn.Conv2d(channels, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + (size // patch) ** 2, dim))
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), t], 1)
        t = self.encoder(self.dropout(t + self.pos_embed))
        return self.head(self.norm(t)[:, 0])


class GPT(nn.Module):
    """nn::GPT: the head's weight is the token embedding's (one parameter
    under both names)."""

    def __init__(self, vocab, context, depth, heads, dim, dropout=0.0):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, context, dim))
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok_embed.weight

    def forward(self, ids):
        t = ids.shape[1]
        causal = torch.full((t, t), float("-inf"), dtype=self.pos_embed.dtype).triu(1)
        h = self.dropout(self.tok_embed(ids) + self.pos_embed[:, :t])
        return self.head(self.norm(self.encoder(h, mask=causal)))
