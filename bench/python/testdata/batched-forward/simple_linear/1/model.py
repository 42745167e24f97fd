# The report's simple_linear with one forward per batch instead of one per
# request: bench/python -seed bench/python/testdata/batched-forward measures
# how much of the python backend's cost per batch is the model's own
# (docs/performance.md, "Sixth machine").
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model = torch.jit.load('model.pt')
        self.model.eval()

    def execute(self, requests):
        # Every request's rows stacked, one forward, the output split back
        # by each request's row count.
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy() for r in requests]
        with torch.no_grad():
            out = self.model(torch.from_numpy(np.concatenate(arrays)).float()).numpy()
        responses, at = [], 0
        for a in arrays:
            n = a.shape[0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT__0", out[at:at + n])]))
            at += n
        return responses
