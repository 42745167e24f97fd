"""IN[0] responses for a request of IN, from a thread of their own; the
final flag comes alone, after the last response (zero responses for 0)."""
import json
import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("square_stream needs the decoupled transaction policy")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            t = threading.Thread(target=self.respond, args=(sender, value), daemon=True)
            t.start()
            self.threads.append(t)
        return None

    def respond(self, sender, value):
        n = int(value.reshape(-1)[0])
        for _ in range(n):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for t in self.threads:
            t.join(10)
