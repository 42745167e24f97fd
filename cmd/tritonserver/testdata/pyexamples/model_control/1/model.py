"""The python model loading API from execute, as python_backend's README
shows it: pb_utils.load_model with a config override, with model files,
unload_model and is_model_ready. OP says what to do; READY is 1 when the
model acted on is ready afterwards, 0 when not."""
import json

import numpy as np

import triton_python_backend_utils as pb_utils

# A model that exists only as the files load_model sends: OUT = 3 * IN.
TRIPLE = b"""
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", 3 * pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
"""

TRIPLE_CONFIG = {
    "backend": "python",
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
}

# sum_diff's configuration with two instances instead of one.
SUM_DIFF_CONFIG = {
    "backend": "python",
    "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("A", "B")],
    "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("SUM", "DIFF")],
    "instance_group": [{"kind": "KIND_CPU", "count": 2}],
}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy().reshape(-1)[0].decode()
            try:
                if op == "load_files":
                    pb_utils.load_model("triple", config=json.dumps(TRIPLE_CONFIG), files={"file:1/model.py": TRIPLE})
                    name = "triple"
                elif op == "load_config":
                    pb_utils.load_model(model_name="sum_diff", config=json.dumps(SUM_DIFF_CONFIG))
                    name = "sum_diff"
                elif op == "unload":
                    pb_utils.unload_model("triple")
                    name = "triple"
                elif op == "files_without_config":
                    pb_utils.load_model("triple", files={"file:1/model.py": TRIPLE})
                    name = "triple"
                else:
                    raise pb_utils.TritonModelException("unknown OP %r" % op)
            except pb_utils.TritonModelException as e:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("%s: %s" % (op, e))))
                continue
            ready = pb_utils.is_model_ready(name)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("READY", np.array([int(ready)], dtype=np.int32))]))
        return out
