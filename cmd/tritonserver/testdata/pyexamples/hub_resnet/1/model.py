# Written for tritonbuild's tests: a network loaded through torch.hub at
# initialize, run on the device the instance kind names, and its output
# handed back through DLPack.
import torch
from torch.utils.dlpack import to_dlpack

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if args["model_instance_kind"] != "CPU":
            raise pb_utils.TritonModelException("this test model runs on KIND_CPU only")
        self.net = torch.hub.load("pytorch/vision:v0.14.1", "resnet50",
                                  weights="IMAGENET1K_V2", skip_validation=True).eval()

    def execute(self, requests):
        out = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            with torch.no_grad():
                scores = self.net(torch.from_numpy(images))
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor.from_dlpack("SCORES", to_dlpack(scores))]))
        return out
