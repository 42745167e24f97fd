"""The sum and difference computed by a torch module, as python_backend's
pytorch example does: the module is called on the numpy inputs."""
import json

import torch
from torch import nn

import triton_python_backend_utils as pb_utils


class SumDiff(nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "SUM")["data_type"])
        self.net = SumDiff()

    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A")
            b = pb_utils.get_input_tensor_by_name(request, "B")
            # One output from numpy arrays, one through torch tensors.
            s, _ = self.net(a.as_numpy(), b.as_numpy())
            _, d = self.net(torch.from_numpy(a.as_numpy()), torch.from_numpy(b.as_numpy()))
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", s.astype(self.dtype)),
                pb_utils.Tensor.from_dlpack("DIFF", torch.utils.dlpack.to_dlpack(d)),
            ]))
        return out
