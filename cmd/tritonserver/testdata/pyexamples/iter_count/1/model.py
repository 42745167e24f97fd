"""Counts a request's runs through rescheduling and answers once, when the
request ran IN times; until then its entry in the returned list is None."""
import numpy as np

import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}  # correlation id -> runs so far

    def execute(self, requests):
        responses = []
        for request in requests:
            key = _scalar(request, "CORRID")
            want = _scalar(request, "IN")
            if _scalar(request, "START"):
                self.runs[key] = 0
            self.runs[key] += 1
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([[self.runs[key]]], np.int32))])
            if want < 0:
                del self.runs[key]
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(out)  # wrong: a rescheduled request has no response yet
                continue
            if self.runs[key] < want and not request.is_cancelled():
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            del self.runs[key]
            responses.append(out)
        return responses
