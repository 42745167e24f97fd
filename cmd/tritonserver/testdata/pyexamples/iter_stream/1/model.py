"""Counts a request's iterations by rescheduling it: each execute of a
request sends the iteration's number, and releases the request with
RESCHEDULE until it ran IN times. The sequence's correlation id (the
server's, one per request) keys the count; START marks the first run."""
import numpy as np

import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}  # correlation id -> [iterations wanted, iterations done]

    def execute(self, requests):
        for request in requests:
            key = _scalar(request, "CORRID")
            if _scalar(request, "START"):
                self.runs[key] = [_scalar(request, "IN"), 0]
            run = self.runs[key]
            run[1] += 1
            sender = request.get_response_sender()
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([[run[1]]], np.int32))])
            if run[1] >= run[0] or request.is_cancelled():
                del self.runs[key]
                sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            # Rescheduled before execute returns, as the decoupled mode asks.
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            sender.send(out)
        return None
