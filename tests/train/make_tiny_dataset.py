#!/usr/bin/python3
"""Writes a small Fashion-MNIST-shaped dataset as IDX files (for CLI tests).

    make_tiny_dataset.py DIR

DIR/{train,test}-{images,labels}.idx.gz: 600 and 200 images of 28 x 28 whose
class (0..9) shows as a broken bright band at row 2 * class + 4 in strong noise,
so a small MLP learns it in a few steps but not perfectly.
"""
import gzip
import os
import random
import struct
import sys


def write(path, dims, data):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, len(dims)))
        for d in dims:
            f.write(struct.pack(">I", d))
        f.write(bytes(data))


def make(n, seed):
    rng = random.Random(seed)
    images, labels = [], []
    for i in range(n):
        c = i % 10
        img = [rng.randrange(0, 160) for _ in range(28 * 28)]
        for col in range(28):
            if rng.random() < 0.5:
                img[(2 * c + 4) * 28 + col] = 255
        images.extend(img)
        labels.append(c)
    return images, labels


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for split, n, seed in (("train", 600, 1), ("test", 200, 2)):
        images, labels = make(n, seed)
        write(os.path.join(out, f"{split}-images.idx.gz"), [n, 28, 28], images)
        write(os.path.join(out, f"{split}-labels.idx.gz"), [n], labels)


if __name__ == "__main__":
    main()
