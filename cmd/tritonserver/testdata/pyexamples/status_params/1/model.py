"""Response parameters and TritonError codes, chosen by the CODE input."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils

CODES = [
    pb_utils.TritonError.UNKNOWN,
    pb_utils.TritonError.INTERNAL,
    pb_utils.TritonError.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG,
    pb_utils.TritonError.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED,
    pb_utils.TritonError.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED,
]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = int(pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy()[0])
            if code >= 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("asked for code %d" % code, CODES[code])))
                continue
            params = json.loads(request.parameters())
            params.update({"answered": True, "count": 3, "big": 1 << 40, "word": "ok"})
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([code], dtype=np.int32))],
                parameters=params))
        return responses
