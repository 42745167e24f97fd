"""Times the python stub's own work for one exec frame, part by part.

bench/python measures the stub's CPU per batch inside the server. This
script measures the same batch in a tight loop, with no server, no pipe,
and no poll: the frame the server sends for N one-row requests, parsed and
run by tritonbuild_stub.Stub over a memfd region, with the report's
model.py. The difference between the two counts is what surrounds the
stub's Python in the server (docs/performance.md, issue 18).

Run from the repository root with the interpreter that has torch:

    /usr/bin/python3 bench/python/stubparts.py 1 3 8

With --json first, the table is replaced by one JSON object of two maps
from each N to microseconds: "execute", the whole Stub.execute, and
"model", model.py's execute(requests) alone on requests built beforehand
(none of the stub's own work). bench/python runs it that way, in the same
run, to put two floors beside its measured rows: the stub's, and one that
no server of model.py can go below. --model PATH
(before the sizes) times another model.py of the same inputs and outputs
in place of the report's: bench/python passes the one its -seed gives.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.getcwd()
STUB = os.path.join(ROOT, "runtime", "python", "stub")
SEED = os.path.join(ROOT, "runtime", "python", "testdata", "seed-model-repository-batched", "simple_linear", "1",
                    "model.py")
MAKE_MODEL = os.path.join(ROOT, "runtime", "python", "testdata", "make_model.py")
REGION = 1 << 20
CANCEL_AT = 1 << 16  # far past the inputs of any batch this script sends
OUT_AT = 1 << 17
WARM, CALLS = 300, 3000


def per_call_us(fn):
    for _ in range(WARM):
        fn()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - t0) / CALLS * 1e6


def load_model(work, path):
    # model.py loads 'model.pt' from the working directory, as in the report.
    subprocess.run([sys.executable, MAKE_MODEL, os.path.join(work, "model.pt")], check=True,
                   stdout=subprocess.DEVNULL)
    spec = importlib.util.spec_from_file_location("model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.chdir(work)
    try:
        model = mod.TritonPythonModel()
        if hasattr(model, "initialize"):  # optional, as under Triton
            model.initialize({})
    finally:
        os.chdir(ROOT)
    return model


def frame(shm, n, np):
    """The exec frame instance.go writes for n one-row FP32[10] requests."""
    reqs = []
    row = np.arange(10, dtype=np.float32).tobytes()
    for k in range(n):
        off = k * 64  # instance.go aligns each input to 64 bytes
        shm.mm[off:off + len(row)] = row
        reqs.append('{"in":[["INPUT__0","FP32",[1,10],%d,%d]],"out":["OUTPUT__0"],"id":""}' % (off, len(row)))
    return ('{"op":"exec","seq":1,"shm":%d,"out":%d,"cx":%d,"poll":true,"reqs":[%s]}'
            % (REGION, OUT_AT, CANCEL_AT, ",".join(reqs))).encode()


def main(argv):
    args = argv[1:]
    as_json = bool(args) and args[0] == "--json"
    if as_json:
        args = args[1:]
    model_py = SEED
    if args and args[0] == "--model":
        if len(args) < 2:
            sys.exit("stubparts: --model needs the path of a model.py")
        model_py, args = os.path.abspath(args[1]), args[2:]
        if not os.path.isfile(model_py):
            sys.exit("stubparts: --model %s: no such file" % model_py)
    sizes = [int(a) for a in args] or [1, 3, 8]
    if min(sizes) < 1:
        sys.exit("stubparts: a batch holds at least one request, not %d" % min(sizes))
    if max(sizes) * 64 > CANCEL_AT:
        sys.exit("stubparts: a batch of %d does not fit before the cancel flags" % max(sizes))
    sys.path.insert(0, STUB)
    import numpy as np
    import tritonbuild_stub as ts

    fd = os.memfd_create("stubparts")
    os.ftruncate(fd, REGION)
    shm = ts.Shm(fd)
    shm.ensure(REGION)
    stub = ts.Stub(ts.Channel(-1, -1), shm)
    with tempfile.TemporaryDirectory(prefix="stubparts-") as work:
        stub.model = load_model(work, model_py)
    incoming = ts.pb_utils.InferenceRequest._incoming

    if not as_json:
        print("%3s %10s %14s %14s %16s %10s" % ("N", "parse us", "requests us", "model.py us", "Stub.execute us",
                                                 "rest us"))
    wholes, models = {}, {}
    for n in sizes:
        data = frame(shm, n, np)
        msg = json.loads(data)

        def requests():
            return [incoming(stub._inputs(r["in"]), r["out"], r.get("id", ""), r.get("p"), None, False,
                             (shm, CANCEL_AT + k)) for k, r in enumerate(msg["reqs"])]

        built = requests()
        reply = stub.execute(json.loads(data))
        if not isinstance(reply, str) or '"out":[' not in reply:
            sys.exit("stubparts: the stub did not answer the frame with outputs: %r" % (reply,))
        parse = per_call_us(lambda: json.loads(data))
        build = per_call_us(requests)
        model = per_call_us(lambda: stub.model.execute(built))
        whole = per_call_us(lambda: stub.execute(json.loads(data)))
        wholes[n], models[n] = whole, model
        if not as_json:
            print("%3d %10.1f %14.1f %14.1f %16.1f %10.1f" % (n, parse, build, model, whole,
                                                            whole - parse - build - model))
    if as_json:
        print(json.dumps({"execute": {str(n): us for n, us in wholes.items()},
                          "model": {str(n): us for n, us in models.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
