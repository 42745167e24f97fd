"""Sum and difference of two inputs, with the config helpers every python
backend example starts with."""
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        # The helpers return the config entries as dicts, or None.
        assert pb_utils.get_output_config_by_name(config, "NONE") is None
        assert pb_utils.get_input_config_by_name(config, "A")["dims"] == [4]
        assert not pb_utils.using_decoupled_model_transaction_policy(config)
        self.types = {}
        for name in ("SUM", "DIFF"):
            entry = pb_utils.get_output_config_by_name(config, name)
            self.types[name] = pb_utils.triton_string_to_numpy(entry["data_type"])

    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("SUM", (a + b).astype(self.types["SUM"])),
                pb_utils.Tensor("DIFF", (a - b).astype(self.types["DIFF"])),
            ]))
        return out
