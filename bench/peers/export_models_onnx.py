"""Writes the real models of the ONNX import as ONNX files (opset 17, random weights from a
fixed seed, dynamic batch): ResNet-50 and MobileNetV2 (torchvision, 224x224 images) and a
BERT-base-shaped encoder (12 layers, hidden 768, 12 heads, GELU, LayerNorm, an attention mask
over padded tokens), with an input for each and PyTorch's output on it (.npy), for comparing
dflow and ONNX Runtime. Usage:

  /usr/bin/python3 export_models_onnx.py OUT_DIR [--models resnet50,mobilenet_v2,encoder]
      [--batch N] [--seq N]
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch


class EncoderLayer(torch.nn.Module):
    """A post-norm transformer encoder layer as BERT's: self-attention with an additive mask,
    residual and LayerNorm, then a GELU feed-forward, residual and LayerNorm."""

    def __init__(self, hidden, heads, ff):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)
        self.norm1 = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.ff1 = torch.nn.Linear(hidden, ff)
        self.ff2 = torch.nn.Linear(ff, hidden)
        self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_bias):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        def heads(t):
            return t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + mask_bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.out(ctx))
        return self.norm2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


class Encoder(torch.nn.Module):
    """BERT-base's shape: token and position embeddings, 12 layers of hidden 768."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, ff=3072, max_len=512):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, hidden)
        self.positions = torch.nn.Embedding(max_len, hidden)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.layers = torch.nn.ModuleList(EncoderLayer(hidden, heads, ff) for _ in range(layers))

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.norm(self.tokens(ids) + self.positions(pos))
        # 0 where a token may be attended to, a large negative number over the padding.
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--models", default="resnet50,mobilenet_v2,encoder")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(2026)
    rng = np.random.RandomState(2026)
    for name in a.models.split(","):
        start = time.time()
        if name in ("resnet50", "mobilenet_v2"):
            import torchvision
            model = getattr(torchvision.models, name)().eval()
            # Batch norm statistics and affine parameters as a trained network has them (the
            # defaults, mean 0 and variance 1, make it nearly the identity).
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.data.uniform_(0.5, 1.5)
                    m.bias.data.uniform_(-0.2, 0.2)
            inputs = {"x": rng.standard_normal((a.batch, 3, 224, 224)).astype(np.float32)}
            axes = {"x": {0: "batch"}, "y": {0: "batch"}}
        elif name == "encoder":
            model = Encoder().eval()
            ids = rng.randint(0, 30522, size=(a.batch, a.seq)).astype(np.int64)
            mask = np.ones((a.batch, a.seq), dtype=np.int64)
            mask[0, a.seq // 2:] = 0  # the first sequence padded to half its length
            inputs = {"ids": ids, "mask": mask}
            axes = {"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"},
                    "y": {0: "batch", 1: "seq"}}
        else:
            sys.exit(f"unknown model '{name}' (resnet50, mobilenet_v2, encoder)")
        args = tuple(torch.from_numpy(v) for v in inputs.values())
        path = os.path.join(a.out, f"{name}.onnx")
        with torch.no_grad():
            torch.onnx.export(model, args, path, opset_version=17, input_names=list(inputs),
                              output_names=["y"], dynamic_axes=axes)
            y = model(*args).numpy()
        for key, value in inputs.items():
            np.save(os.path.join(a.out, f"{name}.{key}.npy"), value)
        np.save(os.path.join(a.out, f"{name}.torch.npy"), y)
        print(f"{name}: {path} ({os.path.getsize(path) / 2**20:.1f} MiB, "
              f"{time.time() - start:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
