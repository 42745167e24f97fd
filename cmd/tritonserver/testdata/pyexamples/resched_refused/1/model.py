"""Asks to reschedule every request although its config has no iterative
sequence batcher; the model passes the refusal on as the request's error."""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("set_release_flags accepted RESCHEDULE")))
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("refused: %s" % exc)))
        return responses
