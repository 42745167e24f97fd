"""Runs a request IN times through rescheduling, adding up the implicit
state input each run sees, and answers once: OUT = [runs, that sum]. Each
run would pass STATE_IN + 1 on, but only the last run returns a response
to carry a STATE_OUT."""
import numpy as np

import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.seen = {}  # correlation id -> [runs, sum of STATE_IN]

    def execute(self, requests):
        responses = []
        for request in requests:
            key = _scalar(request, "CORRID")
            if _scalar(request, "START"):
                self.seen[key] = [0, 0]
            state = _scalar(request, "STATE_IN")
            seen = self.seen[key]
            seen[0] += 1
            seen[1] += state
            if seen[0] < _scalar(request, "IN"):
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            del self.seen[key]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([seen], np.int32)),
                pb_utils.Tensor("STATE_OUT", np.array([[state + 1]], np.int32)),
            ]))
        return responses
