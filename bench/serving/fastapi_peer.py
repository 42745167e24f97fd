"""The peer a user would pick instead of tritonserver: FastAPI + uvicorn
serving the same TorchScript model on the KServe v2 JSON route, one
process, torch on one intra-op thread (as the server's models are).

    /usr/bin/python3 fastapi_peer.py MODEL.pt PORT
"""
import sys

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

torch.set_num_threads(1)
torch.set_num_interop_threads(1)
model = torch.jit.load(sys.argv[1])
model.eval()
app = FastAPI()


@app.get("/v2/health/ready")
def ready():
    return {}


@app.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request):
    body = await request.json()
    inp = body["inputs"][0]
    x = torch.tensor(inp["data"], dtype=torch.float32).reshape(inp["shape"])
    with torch.inference_mode():
        y = model(x)
    return JSONResponse({
        "model_name": name,
        "outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": list(y.shape),
                     "data": y.flatten().tolist()}],
    })


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
