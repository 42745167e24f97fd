"""No config.pbtxt at all: auto_complete_config declares everything, as
python_backend's auto_complete example does."""
import json

import triton_python_backend_utils as pb_utils

INPUTS = [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]},
          {"name": "B", "data_type": "TYPE_FP32", "dims": [4]}]
OUTPUTS = [{"name": "SUM", "data_type": "TYPE_FP32", "dims": [4]},
           {"name": "DIFF", "data_type": "TYPE_FP32", "dims": [4]}]


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        have = {io["name"] for io in config["input"] + config["output"]}
        for entry in INPUTS:
            if entry["name"] not in have:
                auto_complete_model_config.add_input(entry)
        for entry in OUTPUTS:
            if entry["name"] not in have:
                auto_complete_model_config.add_output(entry)
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        # initialize sees the completed configuration.
        assert [i["name"] for i in config["input"]] == ["A", "B"], config
        self.dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "SUM")["data_type"])

    def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", (a + b).astype(self.dtype)),
                                                   pb_utils.Tensor("DIFF", (a - b).astype(self.dtype))]))
        return out
