#!/usr/bin/python3
"""PyTorch's side of the reference CNNs, the ones kdp_bench_models times (the
same layers, batch 64 of [1, 28, 28] images):

  H  Horovod's examples/pytorch/pytorch_mnist.py Net
  E  pytorch/examples mnist/main.py Net
  B  conv-BN-ReLU 1->32, 32->32, pool, 32->64, pool, global average pool, fc 64->10
  V  the vision transformer vit(4,64,6,4,128) as kdp/nn/transformer.hpp describes
     it (dropout 0.1; PyTorch's attention is F.scaled_dot_product_attention)
  G  the GPT gpt(4,4,128) as kdp/nn/transformer.hpp describes it, on windows of
     256 byte tokens, batch 16 (causal attention: SDPA's causal kernel)

    torch_cnn.py --layout 1x1|1xN|2x1 [--models H,E,B] [--seconds S] [--quick]

Layouts and output: see torch_steps.py.
"""
import sys

from torch_steps import main


def horovod(nn):
    return nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(10, 20, 5),
                         nn.Dropout2d(0.5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(320, 50), nn.ReLU(), nn.Dropout(0.5), nn.Linear(50, 10))


def examples(nn):
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                         nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


def batch_norm(nn):
    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2), *block(32, 64),
                         nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def vit(nn, patch=4, dim=64, depth=6, heads=4, mlp=128, size=28, classes=10, dropout=0.1):
    import torch

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Conv2d(1, dim, patch, patch)
            self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos_embed = nn.Parameter(torch.randn(1, 1 + (size // patch) ** 2, dim) * 0.02)
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
    return ViT()


def gpt(nn, depth=4, heads=4, dim=128, context=256, vocab=256, dropout=0.1):
    import inspect
    import torch
    # PyTorch 2.x takes is_causal, with which attention drops the mask for
    # SDPA's causal kernel; 1.13 (Debian's) has neither.
    causal = ({"is_causal": True}
              if "is_causal" in inspect.signature(nn.TransformerEncoder.forward).parameters else {})

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embed = nn.Embedding(vocab, dim)
            self.pos_embed = nn.Parameter(torch.randn(1, context, dim) * 0.02)
            self.dropout = nn.Dropout(dropout)
            layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            self.head.weight = self.tok_embed.weight

        def forward(self, ids):
            t = ids.shape[1]
            mask = torch.full((t, t), float("-inf")).triu(1)
            h = self.encoder(self.dropout(self.tok_embed(ids) + self.pos_embed[:, :t]),
                             mask=mask, **causal)
            return self.head(self.norm(h))
    return GPT()


def byte_windows(torch, batch, context=256, vocab=256):
    """Windows of random byte tokens and their next tokens, as kdp's G."""
    g = torch.Generator().manual_seed(1)
    window = torch.randint(0, vocab, (batch, context + 1), generator=g)
    return window[:, :-1].contiguous(), window[:, 1:].reshape(-1)


MODELS = {"H": (horovod, (1, 28, 28), 10, 64), "E": (examples, (1, 28, 28), 10, 64),
          "B": (batch_norm, (1, 28, 28), 10, 64), "V": (vit, (1, 28, 28), 10, 64),
          "G": (gpt, None, 256, 16, byte_windows)}

if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODELS))
