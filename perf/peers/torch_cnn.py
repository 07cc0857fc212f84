#!/usr/bin/python3
"""PyTorch's side of the reference CNNs, the ones kdp_bench_models times (the
same layers, batch 64 of [1, 28, 28] images):

  H  Horovod's examples/pytorch/pytorch_mnist.py Net
  E  pytorch/examples mnist/main.py Net
  B  conv-BN-ReLU 1->32, 32->32, pool, 32->64, pool, global average pool, fc 64->10
  V  the vision transformer vit(4,64,6,4,128) as kdp/nn/transformer.hpp describes
     it (dropout 0.1; PyTorch's attention is F.scaled_dot_product_attention)

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


MODELS = {"H": (horovod, (1, 28, 28), 10, 64), "E": (examples, (1, 28, 28), 10, 64),
          "B": (batch_norm, (1, 28, 28), 10, 64), "V": (vit, (1, 28, 28), 10, 64)}

if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODELS))
