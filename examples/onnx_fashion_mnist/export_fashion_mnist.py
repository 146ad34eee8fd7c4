"""Writes two Fashion-MNIST classifiers defined in PyTorch, untrained (PyTorch's own
initialization from a fixed seed), as ONNX files for dflow to import and train
(onnx_fashion_mnist): mlp.onnx, 784-512-512-10 with ReLUs, and cnn.onnx, conv 3x3 (32) -> ReLU
-> max pool 2 -> conv 3x3 (64) -> ReLU -> max pool 2 -> dense 128 -> ReLU -> dense 10. Each takes
images "x" [N, 784] (N free) and gives "logits" [N, 10]; opset 17. Usage:

  /usr/bin/python3 export_fashion_mnist.py OUT_DIR [--models mlp,cnn] [--seed S]
"""
import argparse
import os

import torch


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))


class Images(torch.nn.Module):
    """[N, 784] rows as [N, 1, 28, 28] images (a Reshape in the ONNX file)."""

    def forward(self, x):
        return x.reshape(-1, 1, 28, 28)


def cnn():
    return torch.nn.Sequential(
        Images(),
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    makers = {"mlp": mlp, "cnn": cnn}
    for name in a.models.split(","):
        if name not in makers:
            raise SystemExit(f"error: unknown model '{name}' (mlp, cnn)")
        torch.manual_seed(a.seed)
        model = makers[name]().eval()
        path = os.path.join(a.out, name + ".onnx")
        torch.onnx.export(model, torch.zeros(2, 784), path, opset_version=17,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
        params = sum(t.numel() for t in model.parameters())
        print(f"wrote {path} ({params} parameters, untrained)")


if __name__ == "__main__":
    main()
