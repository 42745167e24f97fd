"""async def execute: both models asked at once with async_exec, as
python_backend's bls async example does; answers come from the one
MODEL_NAME names, after checking that the other agrees."""
import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A")
            b = pb_utils.get_input_tensor_by_name(request, "B")
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode()
            other = "torch_sum_diff" if target == "sum_diff" else "sum_diff"
            pending = [pb_utils.InferenceRequest(model_name=name, requested_output_names=["SUM", "DIFF"],
                                                 inputs=[a, b]).async_exec() for name in (target, other)]
            mine, theirs = await asyncio.gather(*pending)
            for reply in (mine, theirs):
                if reply.has_error():
                    raise pb_utils.TritonModelException(reply.error().message())
            s1 = pb_utils.get_output_tensor_by_name(mine, "SUM").as_numpy()
            s2 = pb_utils.get_output_tensor_by_name(theirs, "SUM").as_numpy()
            assert np.allclose(s1, s2), (s1, s2)
            out.append(pb_utils.InferenceResponse(output_tensors=mine.output_tensors()))
        return out
