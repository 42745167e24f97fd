"""Polls request.is_cancelled() the way a long-running model would."""
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            wait = float(pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0])
            deadline = time.monotonic() + wait
            while not request.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)
            cancelled = request.is_cancelled()
            print("request %s cancelled=%s" % (request.request_id(), cancelled))
            sys.stdout.flush()
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("CANCELLED", np.array([cancelled]))]))
        return responses
