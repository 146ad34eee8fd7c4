"""Writes the benchmark MLP (784-512-512-10, batch 128) as an ONNX file for the ONNX Runtime
peer. Usage: /usr/bin/python3 export_mlp_onnx.py OUT.onnx"""
import sys

import torch

model = torch.nn.Sequential(
    torch.nn.Linear(784, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10))
torch.onnx.export(model, torch.rand(128, 784), sys.argv[1], input_names=["x"], output_names=["y"])
