"""An async execute awaiting two decoupled BLS calls at once
(async_exec(decoupled=True)), as python_backend's bls_decoupled async model
does: SUM is twice what square_stream streams for IN."""
import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        out = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(1, 1)
            calls = [pb_utils.InferenceRequest(model_name="square_stream", requested_output_names=["OUT"],
                                               inputs=[pb_utils.Tensor("IN", value)]).async_exec(decoupled=True)
                     for _ in range(2)]
            total = np.zeros(1, dtype=np.int64)
            for replies in await asyncio.gather(*calls):
                for reply in replies:
                    if reply.has_error():
                        raise pb_utils.TritonModelException(reply.error().message())
                    if reply.output_tensors():
                        total += pb_utils.get_output_tensor_by_name(reply, "OUT").as_numpy().reshape(1)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return out
