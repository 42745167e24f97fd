# Test model for the python backend: echoes its inputs and misbehaves on
# request, keyed by the first element of INPUT (an FP32 tensor):
#   -1: the process exits (os._exit) during execute
#   -2: execute hangs (sleeps far past any test timeout)
#   -3: execute raises ValueError("boom")
#   -4: this request's response carries TritonError("bad input")
# Outputs: OUTPUT (INPUT echoed), BATCH (INT64 [1]: len(requests) of the
# execute call), TEXT (BYTES input echoed when present), CWD (BYTES [1]),
# REQUEST_ID (BYTES [1]: request_id()).
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        pb_utils.Logger.log_info("probe initialized for %s" % args["model_name"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            mode = float(x.flat[0]) if x.size else 0.0
            if mode == -1:
                os._exit(7)
            if mode == -2:
                time.sleep(3600)
            if mode == -3:
                raise ValueError("boom")
            if mode == -4:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("bad input")))
                continue
            outs = [
                pb_utils.Tensor("OUTPUT", x.copy()),
                pb_utils.Tensor("BATCH", np.array([len(requests)], dtype=np.int64)),
                pb_utils.Tensor("CWD", np.array([os.getcwd().encode()], dtype=np.object_)),
                pb_utils.Tensor("REQUEST_ID", np.array([request.request_id().encode()], dtype=np.object_)),
            ]
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            if text is not None:
                outs.append(pb_utils.Tensor("TEXT_OUT", text.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses

    def finalize(self):
        print("probe finalized")
