"""Unit tests of the shipped triton_python_backend_utils (run by utils_test.go)."""
import contextlib
import io
import json
import os
import unittest

import numpy as np

import triton_python_backend_utils as pb_utils


class BytesTensors(unittest.TestCase):
    def test_round_trip(self):
        arr = np.array([b"a", b"", "w\u00f6rld", b"\x00\xff"], dtype=np.object_)
        encoded = pb_utils.serialize_byte_tensor(arr)
        self.assertEqual(encoded.shape, ())
        self.assertEqual(encoded.item()[:5], b"\x01\x00\x00\x00a")
        decoded = pb_utils.deserialize_bytes_tensor(encoded.item())
        self.assertEqual(list(decoded), [b"a", b"", "w\u00f6rld".encode(), b"\x00\xff"])
        self.assertEqual(decoded.dtype, np.object_)
        self.assertIs(pb_utils.serialize_bytes_tensor, pb_utils.serialize_byte_tensor)

    def test_bytes_dtype_and_empty(self):
        enc = pb_utils.serialize_byte_tensor(np.array([[b"ab"], [b"c"]], dtype=np.bytes_))
        self.assertEqual(list(pb_utils.deserialize_bytes_tensor(enc.item())), [b"ab", b"c"])
        self.assertEqual(pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)), ())

    def test_malformed(self):
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.serialize_byte_tensor(np.zeros(3, dtype=np.float32))


class Types(unittest.TestCase):
    def test_string_to_numpy(self):
        self.assertIs(pb_utils.triton_string_to_numpy("TYPE_FP32"), np.float32)
        self.assertIs(pb_utils.triton_string_to_numpy("TYPE_STRING"), np.object_)
        self.assertIs(pb_utils.triton_string_to_numpy("INT64"), np.int64)
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.triton_string_to_numpy("TYPE_COMPLEX")

    def test_enum_round_trip(self):
        for dtype in (np.bool_, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64):
            code = pb_utils.numpy_to_triton_type(dtype)
            self.assertIs(pb_utils.triton_to_numpy_type(code), dtype)
        self.assertEqual(pb_utils.numpy_to_triton_type(np.float32), pb_utils.TRITONSERVER_TYPE_FP32)
        self.assertEqual(pb_utils.numpy_to_triton_type(np.object_), pb_utils.TRITONSERVER_TYPE_BYTES)
        self.assertIsNone(pb_utils.numpy_to_triton_type(np.complex64))


class Objects(unittest.TestCase):
    def test_tensor(self):
        t = pb_utils.Tensor("X", np.zeros((2, 3), dtype=np.float32))
        self.assertEqual((t.name(), t.shape(), t.triton_dtype()), ("X", [2, 3], 11))
        self.assertEqual(pb_utils.Tensor("S", np.array(["a"])).triton_dtype(), pb_utils.TRITONSERVER_TYPE_BYTES)
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.Tensor("L", [1, 2, 3])
        back = pb_utils.Tensor.from_dlpack("D", t.to_dlpack())
        self.assertEqual(back.shape(), [2, 3])

    def test_parameters_must_be_finite(self):
        # JSON carries parameters to the server and has no NaN or infinity:
        # refused where the model gives them, with the key in the message.
        for bad in (float("nan"), float("inf"), -float("inf")):
            with self.assertRaisesRegex(pb_utils.TritonModelException, "'score'"):
                pb_utils.InferenceResponse(output_tensors=[], parameters={"score": bad})
        r = pb_utils.InferenceResponse(output_tensors=[], parameters={"score": 0.5})
        self.assertEqual(json.loads(r.parameters()), {"score": 0.5})

    def test_request_response(self):
        t = pb_utils.Tensor("IN", np.ones(2, dtype=np.int32))
        req = pb_utils.InferenceRequest(inputs=[t], requested_output_names=["OUT"], request_id="7")
        self.assertIs(pb_utils.get_input_tensor_by_name(req, "IN"), t)
        self.assertIsNone(pb_utils.get_input_tensor_by_name(req, "NOPE"))
        self.assertEqual((req.requested_output_names(), req.request_id(), req.parameters()), (["OUT"], "7", "{}"))
        with self.assertRaises(pb_utils.TritonModelException):
            req.exec()
        resp = pb_utils.InferenceResponse(output_tensors=[t])
        self.assertIs(pb_utils.get_output_tensor_by_name(resp, "IN"), t)
        self.assertFalse(resp.has_error())
        err = pb_utils.InferenceResponse(error=pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG))
        self.assertEqual((err.error().message(), err.error().code()), ("bad", 3))

    def test_model_config(self):
        cfg = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0,
                                               "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [1]}]}))
        cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [1], "optional": True})  # restated: fine
        cfg.add_output({"name": "B", "data_type": "FP32", "dims": [2]})
        cfg.set_max_batch_size(8)
        cfg.set_dynamic_batching()
        cfg.set_model_transaction_policy({"decoupled": True})
        d = cfg.as_dict()
        self.assertEqual(d["input"], [{"name": "A", "data_type": "TYPE_FP32", "dims": [1], "optional": True}])
        self.assertEqual(d["output"][0]["data_type"], "TYPE_FP32")
        self.assertEqual((d["max_batch_size"], d["dynamic_batching"]), (8, {}))
        self.assertTrue(pb_utils.using_decoupled_model_transaction_policy(d))
        # Triton's rules: the config's statements win, conflicts are ValueError.
        for call, text in (
                (lambda: cfg.set_max_batch_size(4), "specified max_batch_size 8"),
                (lambda: cfg.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [1]}), "expects datatype TYPE_FP32"),
                (lambda: cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [9]}), "the model expects dims [9]"),
                (lambda: cfg.add_input({"name": "C", "dims": [1]}), "missing 'data_type'"),
                (lambda: cfg.add_output({"name": "D", "data_type": "TYPE_FP32", "dims": [1], "optional": True}),
                 "contains property other than"),
                (lambda: cfg.set_model_transaction_policy({"decoupled": False}), "trying to change decoupled"),
                (lambda: cfg.set_model_transaction_policy({"ordered": True}), "other than 'decoupled'")):
            with self.assertRaises(ValueError) as ctx:
                call()
            self.assertIn(text, str(ctx.exception))
            self.assertIn("'m'", str(ctx.exception))
        # What Triton hands auto_complete_config always has these keys.
        empty = pb_utils.ModelConfig({"name": "e"}).as_dict()
        self.assertEqual((empty["input"], empty["output"], empty["max_batch_size"]), ([], [], 0))

    def test_config_helpers(self):
        cfg = {"input": [{"name": "X", "dims": [3]}], "output": [{"name": "Y", "data_type": "TYPE_INT64"}]}
        self.assertEqual(pb_utils.get_input_config_by_name(cfg, "X"), {"name": "X", "dims": [3]})
        self.assertIsNone(pb_utils.get_input_config_by_name(cfg, "Y"))
        self.assertIsNone(pb_utils.get_output_config_by_name({}, "Y"))
        self.assertIs(pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(cfg, "Y")["data_type"]),
                      np.int64)
        self.assertFalse(pb_utils.using_decoupled_model_transaction_policy(cfg))
        self.assertFalse(pb_utils.using_decoupled_model_transaction_policy(
            {"model_transaction_policy": {"decoupled": False}}))
        self.assertIs(pb_utils.TRITON_STRING_TO_NUMPY["TYPE_STRING"], np.object_)
        self.assertEqual((pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL, pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
                          pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END), (1, 2, 2))


class OutsideServer(unittest.TestCase):
    """What a unit test of a model.py sees: no server behind the module."""

    def test_not_in_server(self):
        self.assertFalse(pb_utils.in_server())

    def test_server_only_calls_fail_clearly(self):
        req = pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=["Y"])
        for name, call in (("InferenceRequest.exec", req.exec),
                           ("InferenceRequest.async_exec", req.async_exec),
                           ("InferenceRequest.get_response_sender", req.get_response_sender)):
            with self.assertRaises(pb_utils.ServerOnlyError) as ctx:
                call()
            self.assertIsInstance(ctx.exception, pb_utils.TritonModelException)
            self.assertIn(name + " needs the Triton server", str(ctx.exception))

    def test_attached_server_passes_the_check(self):
        pb_utils._attach_server(object())
        try:
            self.assertTrue(pb_utils.in_server())
            with self.assertRaises(pb_utils.TritonModelException) as ctx:
                pb_utils.InferenceRequest().exec()
            self.assertNotIsInstance(ctx.exception, pb_utils.ServerOnlyError)
        finally:
            pb_utils._attach_server(None)

    def test_logger_writes_stderr(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            pb_utils.Logger.log_info("loaded")
            pb_utils.Logger.log_warn("slow")
            pb_utils.Logger.log_error("bad")
            pb_utils.Logger.log_verbose("hidden unless verbose")
        self.assertEqual(err.getvalue(), "INFO: loaded\nWARNING: slow\nERROR: bad\n")


if __name__ == "__main__":
    unittest.main()


class StubMux(unittest.TestCase):
    """The stub's frame multiplexer (tritonbuild_stub.Mux)."""

    def test_batch_read_by_another_thread_waits_for_main(self):
        # A model thread waiting for its call's answer is the reader when
        # the server's next batch arrives first: the batch must reach the
        # main thread afterwards (it used to be dropped, which hung the
        # next request of a decoupled model whose response thread was
        # still sending).
        import threading
        import tritonbuild_stub as stub

        to_stub_r, to_stub_w = os.pipe()
        server = stub.Channel(-1, to_stub_w)
        mux = stub.Mux(stub.Channel(to_stub_r, -1))
        key = mux.new_id()
        got = {}

        def call():
            got["call"] = mux.wait(key)

        server.send({"op": "exec", "seq": 7})
        server.send({"op": "ack", "id": key})
        reader = threading.Thread(target=call)
        reader.start()
        reader.join(30)
        self.assertFalse(reader.is_alive())
        self.assertEqual(got["call"][0]["op"], "ack")
        os.close(to_stub_w)
        msg, _ = mux.wait("main")
        self.assertEqual(msg, {"op": "exec", "seq": 7})
        self.assertEqual(mux.wait("main"), (None, b""))
        os.close(to_stub_r)


class StubPoll(unittest.TestCase):
    """The stub's polling read (tritonbuild_stub.Channel) backs off when the
    CPU it polls on is wanted by other work."""

    def test_poll_stops_at_a_long_pause_and_skips_the_next_reads(self):
        import threading
        import tritonbuild_stub as stub

        r, w = os.pipe()
        bell = memoryview(bytearray(4096)).cast("Q")
        ch = stub.Channel(r, -1, bell)
        ch.set_poll(100)

        def server_writes(data):
            # As the server does: the bytes, then their count.
            os.write(w, data)
            bell[stub.Channel._BELL_IN] += len(data)

        # Tries a microsecond apart, then a yield that returns 1 ms later:
        # another process had the CPU.
        ticks = iter([0.0, 1e-6, 2e-6, 1e-3])
        yields = []
        ch._clock = lambda: next(ticks)
        ch._yield = lambda: yields.append(1)
        writer = threading.Timer(0.2, lambda: server_writes(b"late"))
        writer.start()
        self.assertEqual(ch._read(64), b"late")
        writer.join()
        self.assertEqual(len(yields), 2, "polling went on after the long pause")
        self.assertEqual(ch._skip, 1)

        # The next read sleeps at once: no clock, no yield.
        def no_poll():
            raise AssertionError("polled while backing off")
        ch._clock = no_poll
        ch._yield = no_poll
        server_writes(b"next")
        self.assertEqual(ch._read(64), b"next")
        self.assertEqual(ch._skip, 0)

        # A second contended poll doubles the back-off.
        ticks = iter([0.0, 5e-3])
        ch._clock = lambda: next(ticks)
        ch._yield = lambda: None
        writer = threading.Timer(0.1, lambda: server_writes(b"x"))
        writer.start()
        self.assertEqual(ch._read(64), b"x")
        writer.join()
        self.assertEqual(ch._skip, 2)

        # Data found after polling on an idle CPU starts over.
        ch._skip = 0
        clock = iter([i * 1e-6 for i in range(100)])
        ch._clock = lambda: next(clock)
        ch._yield = lambda: server_writes(b"y")
        self.assertEqual(ch._read(64), b"y")
        self.assertEqual((ch._skip, ch._backoff), (0, 0))
        self.assertEqual(ch._got, bell[stub.Channel._BELL_IN])
        os.close(r)
        os.close(w)


class StubDoorbell(unittest.TestCase):
    """The stub counts its writes on the doorbell page and polls the
    server's count instead of trying the pipe (doorbell.go)."""

    def test_writes_are_counted(self):
        import tritonbuild_stub as stub

        r, w = os.pipe()
        bell = memoryview(bytearray(4096)).cast("Q")
        ch = stub.Channel(-1, w, bell)
        ch.send({"seq": 1})
        ch.send("{}", b"payload")
        data = os.read(r, 4096)
        self.assertEqual(bell[stub.Channel._BELL_OUT], len(data))
        self.assertEqual(bell[stub.Channel._BELL_IN], 0, "the stub wrote the server's count")
        os.close(r)
        os.close(w)

    def test_poll_reads_the_pipe_only_once_counted(self):
        import tritonbuild_stub as stub

        r, w = os.pipe()
        bell = memoryview(bytearray(4096)).cast("Q")
        ch = stub.Channel(r, -1, bell)
        ch.set_poll(1000)
        # The bytes are in the pipe before the server's count moves: the
        # poll must wait for the count, not read them early.
        os.write(w, b"frame")
        clock = iter([i * 1e-6 for i in range(1000)])
        ch._clock = lambda: next(clock)
        tries = []

        def between_tries():
            tries.append(1)
            if len(tries) == 5:
                bell[stub.Channel._BELL_IN] = 5
        ch._yield = between_tries
        self.assertEqual(ch._read(64), b"frame")
        self.assertEqual(len(tries), 5, "read before the count said the bytes were there")
        self.assertEqual(ch._got, 5)
        os.close(r)
        os.close(w)


class StubPollWindow(unittest.TestCase):
    """The stub's poll window follows the server's turnarounds as the
    server's pollWindow does (poll_test.go)."""

    def test_window_follows_the_waits(self):
        import tritonbuild_stub as stub

        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        ch = stub.Channel(r, w)
        ch.set_poll(100)
        self.assertAlmostEqual(ch._window(), 100e-6)
        for _ in range(100):
            ch._observe(200e-6)
        self.assertAlmostEqual(ch._window(), 250e-6, delta=10e-6)
        for _ in range(100):
            ch._observe(5e-6)
        self.assertAlmostEqual(ch._window(), 100e-6)
        # A server slower than the longest window: back to the configured
        # poll rather than the longest window spent in vain.
        for _ in range(100):
            ch._observe(0.05)
        self.assertAlmostEqual(ch._window(), 100e-6)


class StubInitialize(unittest.TestCase):
    @contextlib.contextmanager
    def initialized(self, name, source):
        # A stub over a pipe and a memfd that has run initialize on a
        # model.py of source, with the collector unfrozen around it so
        # that each test sees only its own freeze.
        import gc
        import tempfile
        import tritonbuild_stub as stub

        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "m", "1"))
            path = os.path.join(d, "m", "1", name)
            with open(path, "w") as f:
                f.write(source)
            r, w = os.pipe()
            shm = os.memfd_create(name)
            os.ftruncate(shm, 1 << 16)
            gc.unfreeze()
            try:
                s = stub.Stub(stub.Channel(r, w), stub.Shm(shm))
                reply = s.initialize({"poll_us": 0, "shm": 1 << 16, "model_file": path, "args": {}})
                self.assertEqual(reply, {"ok": True})
                yield s
            finally:
                gc.unfreeze()
                for fd in (r, w, shm):
                    os.close(fd)

    def test_what_initialize_loaded_is_frozen(self):
        # The objects alive after initialize (here the model's thousand
        # lists) leave the collector's generations, so that the collections
        # each batch sets off do not walk them again and again.
        import gc

        with self.initialized("frozen_model.py",
                              "class TritonPythonModel:\n"
                              "    def initialize(self, args):\n"
                              "        self.kept = [[] for _ in range(1000)]\n"
                              "    def execute(self, requests):\n"
                              "        return []\n") as s:
            self.assertGreaterEqual(gc.get_freeze_count(), 1000)
            self.assertNotIn(s.model.kept, gc.get_objects())

    def test_garbage_of_initialize_is_not_frozen(self):
        # Cycles initialize dropped (loaders leave such garbage) are
        # collected before the freeze: frozen, they would be kept for
        # the stub's life, their finalizers never run.
        import gc

        with self.initialized("cyclic_model.py",
                              "import weakref\n"
                              "class Node:\n"
                              "    pass\n"
                              "class TritonPythonModel:\n"
                              "    def initialize(self, args):\n"
                              "        n = Node()\n"
                              "        n.self = n\n"
                              "        self.dropped = weakref.ref(n)\n"
                              "    def execute(self, requests):\n"
                              "        return []\n") as s:
            gc.collect()
            self.assertIsNone(s.model.dropped(), "a cycle initialize dropped was frozen")


    def test_exec_reply_is_the_json_of_its_responses(self):
        # The stub writes an exec reply's text itself rather than through
        # the JSON encoder: names that need escaping, shapes, offsets,
        # parameters and errors must read back as the encoder's would.
        with self.initialized("reply_model.py",
                              "import numpy as np\n"
                              "import triton_python_backend_utils as pb_utils\n"
                              "class TritonPythonModel:\n"
                              "    def execute(self, requests):\n"
                              "        x = pb_utils.get_input_tensor_by_name(requests[0], 'IN').as_numpy()\n"
                              "        return [pb_utils.InferenceResponse(\n"
                              "                    [pb_utils.Tensor('o\"\\u00e9', (x * 2).reshape(2, 3)),\n"
                              "                     pb_utils.Tensor('unasked', x)], parameters={'k': 1, 's': 'v\"'}),\n"
                              "                pb_utils.InferenceResponse(error=pb_utils.TritonError('bad \"x\"', 3)),\n"
                              "                pb_utils.InferenceResponse([pb_utils.Tensor('B', np.array([b'ab', b''], dtype=object))])]\n") as s:
            np.frombuffer(s.shm.mm, dtype=np.float32, count=6)[:] = np.arange(6)
            reqs = [{"in": [["IN", "FP32", [6], 0, 24]], "out": ["o\"\u00e9"]}, {"in": [], "out": []},
                    {"in": [], "out": []}]
            text = s.execute({"op": "exec", "seq": 9, "shm": 1 << 16, "out": 100, "cx": 64, "reqs": reqs})
            reply = json.loads(text if isinstance(text, str) else json.dumps(text))
            self.assertEqual(reply, {"seq": 9, "shm": 1 << 16, "resps": [
                {"out": [{"n": "o\"\u00e9", "t": "FP32", "s": [2, 3], "o": 128, "b": 24}], "params": {"k": 1, "s": "v\""}},
                {"err": 'bad "x"', "code": 3},
                {"out": [{"n": "B", "t": "BYTES", "s": [2], "o": 192, "b": 10}]}]})
            self.assertEqual(list(np.frombuffer(s.shm.mm, dtype=np.float32, count=6, offset=128)), [0, 2, 4, 6, 8, 10])
            self.assertEqual(bytes(s.shm.mm[192:202]), b"\x02\x00\x00\x00ab\x00\x00\x00\x00")


class BF16Tensors(unittest.TestCase):
    """BF16 tensors hold their raw bits; DLPack carries them as bfloat16."""

    def test_dlpack_round_trip_keeps_bits_and_type(self):
        bits = np.array([0x3FC0, 0xC000, 0x0000], dtype=np.uint16)  # 1.5, -2, 0
        t = pb_utils.Tensor("X", bits, "BF16")
        self.assertEqual(t.triton_dtype(), pb_utils.TRITONSERVER_TYPE_BF16)
        with self.assertRaises(pb_utils.TritonModelException) as cm:
            t.as_numpy()
        self.assertIn("to_dlpack", str(cm.exception))
        capsule = t.to_dlpack()
        dtype = pb_utils._dl_dtype(capsule)
        self.assertEqual((dtype.code, dtype.bits, dtype.lanes), (pb_utils._DL_BFLOAT, 16, 1))
        back = pb_utils.Tensor.from_dlpack("Y", capsule)
        self.assertEqual(back.triton_dtype(), pb_utils.TRITONSERVER_TYPE_BF16)
        self.assertEqual(back._array.tolist(), bits.tolist())

    def test_other_types_unchanged(self):
        t = pb_utils.Tensor.from_dlpack("Z", np.arange(3, dtype=np.float32))
        self.assertEqual(t.as_numpy().tolist(), [0, 1, 2])
        self.assertEqual(t.triton_dtype(), pb_utils.TRITONSERVER_TYPE_FP32)
