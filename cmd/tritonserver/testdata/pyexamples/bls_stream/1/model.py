"""exec(decoupled=True) iterates the responses of a decoupled model, as
python_backend's bls_decoupled example does."""
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(1, 1)
            total = count = 0
            for reply in pb_utils.InferenceRequest(model_name="square_stream", requested_output_names=["OUT"],
                                                   inputs=[pb_utils.Tensor("IN", value)]).exec(decoupled=True):
                if reply.has_error():
                    raise pb_utils.TritonModelException(reply.error().message())
                if len(reply.output_tensors()) == 0:
                    continue  # the final flag alone
                total += int(pb_utils.get_output_tensor_by_name(reply, "OUT").as_numpy().sum())
                count += 1
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", np.array([total], np.int32)),
                                                   pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
        return out
