"""Forwards each request to the model MODEL_NAME names with a blocking BLS
call, as python_backend's bls sync example does."""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A")
            b = pb_utils.get_input_tensor_by_name(request, "B")
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]  # bytes
            reply = pb_utils.InferenceRequest(model_name=target, requested_output_names=["SUM", "DIFF"],
                                              inputs=[a, b]).exec()
            if reply.has_error():
                # The caller's error, with the callee's code.
                out.append(pb_utils.InferenceResponse(error=reply.error()))
                continue
            out.append(pb_utils.InferenceResponse(output_tensors=reply.output_tensors()))
        return out
