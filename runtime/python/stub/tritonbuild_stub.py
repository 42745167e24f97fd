"""tritonbuild's python backend stub: one process per model instance.

The server starts it as ``python3 -u tritonbuild_stub.py CTL_IN CTL_OUT SHM``
in the model's version directory. CTL_IN and CTL_OUT are pipe descriptors
carrying control frames (4-byte little-endian length, then a JSON object);
SHM is a shared memory file both sides map. Tensor bytes never travel through
the pipes: a frame names each tensor's dtype, shape, offset and length in the
shared region.

Frames from the server: init, exec, fini; or autocomplete alone. Every frame gets exactly one reply.
The stub exits when CTL_IN reaches end of file (the server went away).
"""

import sys

if sys.version_info < (3, 8):
    sys.stderr.write("tritonbuild python stub needs Python >= 3.8, this is %s\n" % sys.version.split()[0])
    sys.exit(3)

import asyncio
import gc
import importlib.util
import json
import mmap
import os
import struct
import threading
import time
import traceback

import numpy as np

import triton_python_backend_utils as pb_utils

_ALIGN = 64
_HEADER = struct.Struct("<II")  # JSON length, payload length
# json.dumps with separators builds a new encoder on every call, a third of
# what encoding a small reply costs; this one is built once.
_ENCODER = json.JSONEncoder(separators=(",", ":"))
# A str as JSON, as _ENCODER writes one (ASCII, escaped).
_quote = json.encoder.encode_basestring_ascii
# A pause this long between two tries of a poll means the OS ran something
# else on this CPU (one try, a load from the doorbell page and a clock
# reading, takes well under a microsecond): the machine has other work, and
# polling on would take CPU time from it. The server's spin budget counts
# only the stubs; this sees everything else too. The server's figure is
# larger (pollGap in poll.go) because its tries yield to its own goroutines;
# nothing else runs between the stub's. The back-off is the same as there.
_POLL_GAP = 30e-6
_MAX_POLL_SKIP = 64
# A poll window grows to at most this many times the configured poll when
# the server's answers take longer (poll.go, maxPollStretch).
_MAX_POLL_STRETCH = 4
# Outputs up to this size are copied into the region as bytes (one call);
# larger ones through a numpy view, which needs no intermediate copy.
_SMALL_OUTPUT = 64 << 10


def _no_yield():
    pass


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class Channel:
    """Framed JSON messages over two pipe descriptors.

    Reads are buffered so that a frame usually costs one read call.
    """

    # Indexes of the two counts in the doorbell page seen as 64-bit words
    # (doorbell.go): bytes the server wrote to our pipe, bytes we wrote
    # to the server's.
    _BELL_IN = 0
    _BELL_OUT = 8

    def __init__(self, rfd, wfd, bell=None):
        self._r = rfd
        self._w = wfd
        # bell: the doorbell page as a memoryview of 64-bit words; without
        # one (tests of other parts) a private page nobody else counts on.
        # _got counts the bytes read.
        self._bell = bell if bell is not None else memoryview(bytearray(128)).cast("Q")
        self._got = 0
        self._buf = b""
        self._poll = 0.0
        self._polling = False
        # After a poll that met contention the next 1, 2, 4 ... up to
        # _MAX_POLL_SKIP reads sleep at once; a poll that got its data
        # without contention starts over.
        self._skip = 0
        self._backoff = 0
        # Moving average of recent waits for the server, in seconds: the
        # poll window stretches to follow it (_window).
        self._wait_avg = 0.0
        self._clock = time.perf_counter  # tests replace these two
        # Runs between two tries of a poll. A try reads the doorbell, a
        # memory load; a sched_yield would be a kernel entry that costs
        # more than the try on the VMs this runs on, and a poll that loses
        # its CPU to other work stops anyway (_POLL_GAP).
        self._yield = _no_yield
        self._wlock = threading.Lock()

    def set_poll(self, micros):
        """Poll for up to micros before sleeping in a read.

        A process asleep in read() lets its CPU go idle, and waking an idle
        virtual CPU costs tens of microseconds: more than a small batch
        takes. A poll watches the server's count on the doorbell page, and
        stops when the CPU is taken by other work (_POLL_GAP).
        """
        self._poll = max(0, micros) / 1e6
        self._polling = self._poll > 0

    def poll_next(self, allowed):
        """Whether the next read polls at all (the server decides per batch:
        polling only pays while a core is free, see spin.go)."""
        self._polling = self._poll > 0 and allowed

    def _read(self, n):
        data = self._poll_read(n)
        self._got += len(data)
        return data

    def _ready(self, n):
        """One try of a poll: the data, or None when there is none yet.

        The pipe stays blocking: a read happens only once the server's
        count says bytes are in it (it counts after each write), so it
        returns at once, and a reader that stops polling sleeps in one
        read() rather than a select() and a read().
        """
        if self._bell[self._BELL_IN] > self._got:
            return os.read(self._r, n)
        return None

    def _poll_read(self, n):
        if self._poll == 0:
            return os.read(self._r, n)
        if not self._polling or self._skip > 0:
            if self._polling:
                self._skip -= 1
            return os.read(self._r, n)
        # The window follows the server's recent turnarounds (poll.go,
        # pollWindow); the real clock times them whatever _clock is.
        t0 = time.perf_counter()
        clock = self._clock
        last = clock()
        end = last + self._window()
        tries = 0
        ready = self._ready
        while True:
            data = ready(n)
            if data is not None:
                if tries:  # data at the first try says nothing about contention
                    self._backoff = 0
                self._observe(time.perf_counter() - t0)
                return data
            tries += 1
            now = clock()
            if now - last > _POLL_GAP:
                self._backoff = min(max(2 * self._backoff, 1), _MAX_POLL_SKIP)
                self._skip = self._backoff
                break
            if now >= end:
                break
            last = now
            self._yield()
        data = os.read(self._r, n)
        self._observe(time.perf_counter() - t0)
        return data

    def _window(self):
        """The next poll's length: as the server's pollWindow.next."""
        want = self._wait_avg * 1.25
        if want > _MAX_POLL_STRETCH * self._poll:
            return self._poll
        return max(self._poll, want)

    def _observe(self, waited):
        """Records a wait: as the server's pollWindow.observe."""
        waited = min(waited, 2 * _MAX_POLL_STRETCH * self._poll)
        self._wait_avg += (waited - self._wait_avg) / 8

    def recv(self):
        """Returns (message, payload) or (None, b"") at end of file."""
        buf = self._buf
        while True:
            if len(buf) >= 8:
                n, pl = _HEADER.unpack_from(buf)
                need = 8 + n + pl
                if len(buf) >= need:
                    self._buf = buf[need:]
                    return json.loads(buf[8:8 + n]), buf[8 + n:need]
            else:
                need = 8
            chunk = self._read(max(65536, need - len(buf)))
            if not chunk:
                return None, b""
            buf = buf + chunk if buf else chunk

    def send(self, obj, payload=b""):
        """Sends obj (a dict, or JSON text already encoded) and payload."""
        body = (obj if isinstance(obj, str) else _ENCODER.encode(obj)).encode("utf-8")
        data = _HEADER.pack(len(body), len(payload)) + body
        with self._wlock:
            self._write(data)
            if payload:
                self._write(payload)

    def _write(self, data):
        # Called with _wlock held: the count has one writer at a time.
        view = memoryview(data)
        bell = self._bell
        while view:
            written = os.write(self._w, view)
            # Counted once in the pipe: the server reads only what the
            # count promises (see Channel._BELL_OUT).
            bell[self._BELL_OUT] = (bell[self._BELL_OUT] + written) & 0xFFFFFFFFFFFFFFFF
            view = view[written:]


class Mux:
    """Lets several threads wait for frames on one channel.

    The main thread waits for the server's next batch; threads of the model
    wait for the answers to their calls (BLS, a decoupled response's
    acknowledgement, a metric). Whoever waits and finds no reader becomes
    the reader: it reads frames, keeps its own and files the others in the
    mailboxes of their recipients. The usual case, the main thread alone,
    costs one uncontended lock more than reading directly.
    """

    def __init__(self, channel):
        self.ch = channel
        self._cond = threading.Condition()
        self._reading = False
        # The main thread's box exists from the start: a batch another
        # thread reads while the main one is busy must wait for it, not be
        # dropped as the answer to a forgotten call.
        self._mail = {"main": []}
        self._closed = False
        self._next = 0
        self._waiting = 0  # threads in cond.wait: the only ones a notify can reach
        self.on_cancel = None

    def new_id(self):
        with self._cond:
            self._next += 1
            key = self._next
            self._mail[key] = []
            return key

    def forget(self, key):
        with self._cond:
            self._mail.pop(key, None)

    def wait(self, key):
        """Returns the next (message, payload) for key ("main" or a call
        id); (None, b"") once the server is gone."""
        cond = self._cond
        with cond:
            while True:
                box = self._mail.get(key)
                if box:
                    return box.pop(0)
                if self._closed:
                    return None, b""
                if not self._reading:
                    self._reading = True
                    break
                self._waiting += 1
                try:
                    cond.wait()
                finally:
                    self._waiting -= 1
        try:
            while True:
                msg, payload = self.ch.recv()
                if msg is None:
                    with cond:
                        self._closed = True
                        cond.notify_all()
                    return None, b""
                target = self._route(msg)
                if target is None:
                    continue
                if target == key:
                    return msg, payload
                with cond:
                    box = self._mail.get(target)
                    if box is not None:  # no one waits for a forgotten call
                        box.append((msg, payload))
                    if self._waiting:
                        cond.notify_all()
        finally:
            with cond:
                self._reading = False
                # The main thread alone (every model without BLS or a
                # decoupled sender) finds no one to hand reading over to.
                if self._waiting:
                    cond.notify_all()

    def _route(self, msg):
        op = msg.get("op")
        if op in ("ack", "blsr", "ret"):
            return msg.get("id")
        if op == "cancel":
            if self.on_cancel is not None:
                self.on_cancel(msg)
            return None
        return "main"


class Shm:
    """The instance's shared memory region as this process maps it."""

    def __init__(self, fd):
        self.fd = fd
        self.mm = None
        self.base = None
        self.size = 0

    def ensure(self, size):
        # The server grows the file before sending a frame that needs more
        # room; map the new size. Views of the old mapping stay valid.
        if size > self.size:
            self.mm = mmap.mmap(self.fd, size)
            # One uint8 array over the whole mapping: slicing and viewing it
            # is much cheaper than asking the mmap for a buffer per tensor.
            self.base = np.frombuffer(self.mm, dtype=np.uint8)
            self.size = size

    def grow(self, need):
        size = max(need, self.size * 2)
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        os.ftruncate(self.fd, size)
        self.ensure(size)


def _describe(exc):
    if isinstance(exc, MemoryError) and _MEMORY_LIMIT:
        return "MemoryError: %s(the stub's memory limit of %d bytes, stub-memory-bytes, was reached)" % (
            "%s " % exc if str(exc) else "", _MEMORY_LIMIT)
    return "%s: %s" % (type(exc).__name__, exc)


def _pack(tensors):
    """Lays tensors out for a frame payload: (wire specs, payload bytes)."""
    specs, parts, offset = [], [], 0
    for tensor in tensors:
        if not isinstance(tensor, pb_utils.Tensor):
            raise pb_utils.TritonModelException("expected pb_utils.Tensor, got %s" % type(tensor).__name__)
        arr = tensor._array  # as_numpy refuses BF16, whose raw bits travel
        if tensor._wire == "BYTES":
            encoded = pb_utils.serialize_byte_tensor(arr)
            data = encoded.item() if isinstance(encoded, np.ndarray) else b""
        else:
            data = np.ascontiguousarray(arr).tobytes()
        specs.append({"n": tensor.name(), "t": tensor._wire, "s": list(arr.shape), "o": offset, "b": len(data)})
        parts.append(data)
        offset += len(data)
    return specs, b"".join(parts)


def _unpack(specs, payload):
    """Tensors from a frame payload (copies the caller owns)."""
    buf = bytearray(payload)
    out = []
    for spec in specs:
        name, wire, shape, off, nbytes = spec["n"], spec["t"], spec["s"], spec["o"], spec["b"]
        if wire == "BYTES":
            arr = pb_utils.deserialize_bytes_tensor(bytes(buf[off:off + nbytes])).reshape(shape)
        else:
            dtype = pb_utils._HELD_AS.get(wire)
            if dtype is None:
                raise pb_utils.TritonModelException("tensor %r has data type %s, which numpy cannot hold" % (name, wire))
            arr = np.frombuffer(buf, dtype=dtype, count=nbytes // dtype.itemsize, offset=off).reshape(shape)
        out.append(pb_utils.Tensor(name, arr, wire))
    return out


def _response_body(response):
    """The JSON part of a response frame (error or parameters) and its tensors."""
    body = {}
    error = response.error()
    if error is not None:
        body["err"] = error.message()
        body["code"] = error.code()
        return body, []
    params = response._parameters_dict()
    if params:
        body["params"] = params
    return body, response.output_tensors()


def _response_from(msg, payload):
    if msg is None:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(
            "the server went away", pb_utils.TritonError.UNAVAILABLE))
    if msg.get("err") is not None or msg.get("code") is not None:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(
            msg.get("err", ""), msg.get("code", pb_utils.TritonError.INTERNAL)))
    return pb_utils.InferenceResponse(output_tensors=_unpack(msg.get("out") or [], payload),
                                      parameters=msg.get("params"))


class Stub:
    def __init__(self, channel, shm):
        self.ch = channel
        self.mux = Mux(channel)
        self.shm = shm
        self.model = None
        self.loop = None
        self.iterative = False
        self._released = []

    # The server link of pb_utils (pb_utils._server): calls that only the
    # server can answer. Each waits for its answer; any thread may call.

    def release(self, fn, **args):
        """Queues a call that needs no answer (a metric the model dropped)."""
        self._released.append((fn, args))

    def _flush_released(self):
        while self._released:
            fn, args = self._released.pop()
            self.ch.send({"op": "call", "id": 0, "fn": fn, "args": args})

    def _ask(self, body, payload=b""):
        self._flush_released()
        key = self.mux.new_id()
        body["id"] = key
        try:
            self.ch.send(body, payload)
            return self.mux.wait(key)
        finally:
            self.mux.forget(key)

    def call(self, fn, **args):
        msg, _ = self._ask({"op": "call", "fn": fn, "args": args})
        if msg is None:
            raise pb_utils.TritonModelException("%s: the server went away" % fn)
        if msg.get("err"):
            raise pb_utils.TritonModelException(msg["err"])
        return msg.get("value")

    def send_response(self, rk, response, final):
        """Sends one response of a decoupled request; returns whether the
        request was cancelled."""
        body = {"op": "resp", "rk": rk, "final": bool(final)}
        tensors = []
        if response is None:
            body["empty"] = True
        else:
            extra, tensors = _response_body(response)
            body.update(extra)
        specs, payload = _pack(tensors)
        body["out"] = specs
        msg, _ = self._ask(body, payload)
        if msg is None:
            raise pb_utils.TritonModelException("Unable to send response: the server went away")
        if msg.get("err"):
            raise pb_utils.TritonModelException(msg["err"])
        return bool(msg.get("cancelled"))

    def bls(self, request, decoupled):
        specs, payload = _pack(request.inputs())
        def text(v):
            # Names often come straight out of a BYTES tensor.
            return v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v)
        body = {"op": "bls", "model": text(request.model_name()), "version": int(request._model_version),
                "in": specs, "outputs": [text(n) for n in request.requested_output_names()],
                "req_id": text(request.request_id()),
                "timeout": int(request.timeout() or 0), "decoupled": bool(decoupled)}
        params = request._parameters_dict()
        if params:
            body["params"] = params
        if not decoupled:
            msg, payload = self._ask(body, payload)
            return _response_from(msg, payload)
        return self._bls_stream(body, payload)

    def _bls_stream(self, body, payload):
        key = self.mux.new_id()
        body["id"] = key
        try:
            self.ch.send(body, payload)
            while True:
                msg, data = self.mux.wait(key)
                if msg is None or msg.get("final") and msg.get("empty"):
                    if msg is None:
                        yield _response_from(None, b"")
                    else:
                        yield pb_utils.InferenceResponse()
                    return
                yield _response_from(msg, data)
                if msg.get("final"):
                    return
        finally:
            self.mux.forget(key)

    def run(self):
        while True:
            msg, _ = self.mux.wait("main")
            if msg is None:
                return 0
            op = msg.get("op")
            if op == "exec":
                self.ch.poll_next(msg.get("poll", True))
                self.ch.send(self.execute(msg))
            elif op == "init":
                self.ch.send(self.initialize(msg))
            elif op == "autocomplete":
                self.ch.send(self.auto_complete(msg))
                return 0
            elif op == "fini":
                self.ch.send(self.finalize())
                return 0
            else:
                self.ch.send({"err": "stub: unknown operation %r" % (op,)})

    def _import_model(self, path):
        """Imports model.py; returns (TritonPythonModel, None) or (None, error reply)."""
        # As Triton does: the version directory and the model directory go
        # on sys.path and model.py is imported as "<version>.model", so it
        # may import modules beside it both ways ("import helper" and
        # "from . import helper").
        version_dir = os.path.dirname(os.path.abspath(path))
        model_dir = os.path.dirname(version_dir)
        for d in (version_dir, model_dir):
            if d not in sys.path:
                sys.path.append(d)
        version = os.path.basename(version_dir)
        name, ext = os.path.splitext(os.path.basename(path))
        try:
            if version.isdigit() and ext == ".py" and name.isidentifier():
                module = importlib.import_module("%s.%s" % (version, name))
            else:  # a model file elsewhere (not <model>/<version>/<file>.py)
                spec = importlib.util.spec_from_file_location("model", path)
                if spec is None or spec.loader is None:
                    return None, {"err": "cannot import %s as a python module" % path}
                module = importlib.util.module_from_spec(spec)
                sys.modules["model"] = module
                spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit from an import is a load failure too
            traceback.print_exc()
            return None, {"err": "importing %s: %s" % (path, _describe(exc))}
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            return None, {"err": "%s defines no class TritonPythonModel" % path}
        return cls, None

    def auto_complete(self, msg):
        """Runs auto_complete_config on the config so far; this process ends
        after the reply, as Triton's auto-complete interpreter does."""
        cls, err = self._import_model(msg["model_file"])
        if err is not None:
            return err
        if not hasattr(cls, "auto_complete_config"):
            return {"ok": True, "config": None}
        try:
            config = pb_utils.ModelConfig(msg["config"])
            result = cls.auto_complete_config(config)
            if result is None:
                result = config
            if not isinstance(result, pb_utils.ModelConfig):
                return {"err": "auto_complete_config returned %s; expected the pb_utils.ModelConfig it was given"
                        % type(result).__name__}
            return {"ok": True, "config": result.as_dict()}
        except BaseException as exc:
            traceback.print_exc()
            return {"err": "auto_complete_config raised %s" % _describe(exc)}

    def initialize(self, msg):
        pb_utils.Logger._verbose = bool(msg.get("verbose"))
        self.ch.set_poll(msg.get("poll_us", 0))
        self.shm.ensure(msg["shm"])
        path = msg["model_file"]
        cls, err = self._import_model(path)
        if err is not None:
            return err
        args = msg["args"]
        try:
            cfg = json.loads(args.get("model_config") or "{}")
        except ValueError:
            cfg = {}
        # Only the iterative sequence batcher puts a released request back
        # in its queue; elsewhere set_release_flags refuses RESCHEDULE.
        self.iterative = bool((cfg.get("sequence_batching") or {}).get("iterative_sequence"))
        try:
            self.model = cls()
            if hasattr(self.model, "initialize"):
                self.model.initialize(args)
        except BaseException as exc:
            traceback.print_exc()
            return {"err": "initialize raised %s" % _describe(exc)}
        if not hasattr(self.model, "execute"):
            return {"err": "TritonPythonModel in %s has no execute method" % path}
        # What is alive now (the interpreter, numpy, torch, the model)
        # lives as long as the stub: out of the collector's sight, the
        # collections that each batch's short-lived objects set off no
        # longer walk it. With torch imported that walk was a fifth of the
        # stub's CPU time per batch of the report's model. The cycles
        # initialize dropped are collected first: frozen, they would be
        # kept (and their finalizers never run) for the stub's life.
        gc.collect()
        gc.freeze()
        return {"ok": True}

    def finalize(self):
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                self.model.finalize()
            except BaseException as exc:
                traceback.print_exc()
                return {"err": "finalize raised %s" % _describe(exc)}
        return {"ok": True}

    def _inputs(self, specs, copy=False):
        mm = self.shm.mm
        held = pb_utils._HELD_AS
        tensor = pb_utils.Tensor
        tensors = []
        for name, wire, shape, off, nbytes in specs:
            if wire == "BYTES":
                arr = pb_utils.deserialize_bytes_tensor(self.shm.base[off:off + nbytes]).reshape(shape)
            else:
                # The server checked that nbytes fits shape and dtype; one
                # constructor call over the mapping is half the cost of
                # slicing, viewing and reshaping.
                arr = np.ndarray(shape, held[wire], mm, off)
                if copy:
                    # A decoupled model may read its inputs after execute
                    # returned, when the region holds the next batch.
                    arr = arr.copy()
            tensors.append(tensor(name, arr, wire))
        return tensors

    def _run_coroutine(self, coro):
        """Runs an async def execute to completion on the instance's loop."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        return self.loop.run_until_complete(coro)

    def execute(self, msg):
        """The reply to an exec frame: a dict, or its JSON text already
        encoded (the usual case, see _execute)."""
        seq = msg["seq"]
        try:
            reply = self._execute(seq, msg)
        except Exception as exc:
            # A fault in the stub itself (not in model.py) fails the batch
            # but keeps the process usable.
            traceback.print_exc()
            reply = {"seq": seq, "err": "python stub: %s" % _describe(exc)}
        # Every reply reports the region's size: outputs written before a
        # batch-level error may have grown it, and the server must never
        # size the file below what is mapped here.
        if isinstance(reply, str):
            return '{"seq":%d,"resps":%s,"shm":%d}' % (seq, reply, self.shm.size)
        reply["shm"] = self.shm.size
        return reply

    def _execute(self, seq, msg):
        """Runs one batch; returns an error or decoupled reply as a dict,
        or the JSON text of the responses' list. That text is written here
        rather than by the JSON encoder, which was a sixth of the stub's
        own time per batch."""
        shm = self.shm
        shm.ensure(msg["shm"])
        requests = []
        decoupled = False
        cx = msg.get("cx")
        incoming = pb_utils.InferenceRequest._incoming
        inputs = self._inputs
        iterative = self.iterative
        for k, r in enumerate(msg["reqs"]):
            rk = r.get("rk")
            decoupled = decoupled or rk is not None
            # The server sets the cancel byte when the request's client
            # gives up (request.is_cancelled()).
            requests.append(incoming(inputs(r["in"], rk is not None), r["out"], r.get("id", ""), r.get("p"),
                                     rk, iterative, None if cx is None else (shm, cx + k)))
        try:
            responses = self.model.execute(requests)
            if asyncio.iscoroutine(responses):
                responses = self._run_coroutine(responses)
        except Exception as exc:
            traceback.print_exc()
            return {"seq": seq, "err": _describe(exc)}
        finally:
            # The byte is reused by the next batch: a request kept past
            # execute keeps what it last saw. One read of the region for
            # all of the batch's flags.
            flags = shm.mm[cx:cx + len(requests)] if cx is not None else b""
            for k, request in enumerate(requests):
                request._freeze_cancel(flags[k] if k < len(flags) else None)
        if decoupled:
            if responses is not None and not (isinstance(responses, (list, tuple)) and
                                              all(r is None for r in responses)):
                return {"seq": seq, "err": "execute of a decoupled model must return None and send its "
                        "responses with request.get_response_sender(); it returned %s" % type(responses).__name__}
            # A request released with RESCHEDULE runs again; one whose
            # final response was sent is over whatever its flags say.
            return {"seq": seq, "resps": [
                {"none": True, "rs": True} if r._rescheduled() and not (r._sender is not None and r._sender._closed)
                else {"none": True} for r in requests]}
        if not isinstance(responses, (list, tuple)):
            return {"seq": seq, "err": "execute returned %s; expected a list of InferenceResponse"
                    % type(responses).__name__}
        if len(responses) != len(requests):
            return {"seq": seq, "err": "execute returned %d responses for %d requests"
                    % (len(responses), len(requests))}
        out = []
        offset = _align(msg["out"])
        response_type = pb_utils.InferenceResponse
        encode = _ENCODER.encode
        for request, response in zip(requests, responses):
            if request._rescheduled():
                # The request comes back for another execute: its one
                # response is still to come, so this one must be None.
                if response is None:
                    out.append('{"rs":true}')
                else:
                    out.append(encode({"err": "execute returned a response for a request it rescheduled "
                                       "(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE); a rescheduled request of a "
                                       "model that is not decoupled must have None in the returned list"}))
                continue
            if not isinstance(response, response_type):
                return {"seq": seq, "err": "execute returned %s in its list; expected InferenceResponse"
                        % type(response).__name__}
            error = response.error()
            if error is not None:
                out.append(encode({"err": error.message(), "code": error.code()}))
                continue
            try:
                specs, offset = self._write_outputs(response, request._requested, offset)
            except Exception as exc:
                traceback.print_exc()
                out.append(encode({"err": "writing outputs: %s" % _describe(exc)}))
                continue
            params = response._parameters
            if params:
                params = response._parameters_dict()
            if params:
                out.append('{"out":[%s],"params":%s}' % (specs, encode(params)))
            else:
                out.append('{"out":[%s]}' % specs)
        return "[%s]" % ",".join(out)

    def _write_outputs(self, response, requested, offset):
        """Copies a response's outputs into the region from offset; returns
        their specs as JSON text (comma-separated objects) and the next
        offset."""
        specs = []
        shm = self.shm
        for tensor in response.output_tensors():
            if not isinstance(tensor, pb_utils.Tensor):
                raise pb_utils.TritonModelException(
                    "output_tensors holds %s; expected Tensor" % type(tensor).__name__)
            name = tensor._name
            if requested and name not in requested:
                continue
            arr = tensor._array  # as_numpy refuses BF16, whose raw bits travel
            wire = tensor._wire
            if wire == "BYTES":
                encoded = pb_utils.serialize_byte_tensor(arr)
                data = encoded.item() if isinstance(encoded, np.ndarray) else b""
                nbytes = len(data)
            else:
                if not arr.dtype.isnative:
                    arr = arr.astype(arr.dtype.newbyteorder("="))
                nbytes = arr.nbytes
            end = offset + nbytes
            if end > shm.size:
                shm.grow(end)
            if wire == "BYTES":
                shm.mm[offset:end] = data
            elif nbytes <= _SMALL_OUTPUT:
                shm.mm[offset:end] = arr.tobytes()  # C order, as the view below
            elif nbytes:
                dst = shm.base[offset:end].view(arr.dtype).reshape(arr.shape)
                dst[...] = arr
            # str of a list of ints is valid JSON ("[1, 5]").
            specs.append('{"n":%s,"t":"%s","s":%s,"o":%d,"b":%d}' % (
                _quote(name), wire, list(arr.shape), offset, nbytes))
            offset = _align(end)
        return ",".join(specs), offset


def _limit_memory(limit):
    """Bounds this process's address space (the server's stub-memory-bytes);
    MemoryError then names the bound."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    global _MEMORY_LIMIT
    _MEMORY_LIMIT = limit


_MEMORY_LIMIT = 0


def _threads():
    """The ids of this process's threads now (0, the calling thread, when
    /proc cannot tell): scheduling settings are a thread's, so the stub
    sets each thread already running (numpy's BLAS starts some at import);
    threads started later inherit them from their creator."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _sched_batch():
    """Puts every thread of this process under SCHED_BATCH (the server's
    stub-scheduling): a stub woken with a batch then waits for its CPU's
    current task to yield rather than preempting it (every thread, see
    _threads). A refusal (a sandbox that filters the call) costs only the
    gain."""
    param = os.sched_param(0)
    for tid in _threads():
        try:
            os.sched_setscheduler(tid, os.SCHED_BATCH, param)
        except ProcessLookupError:
            pass  # the thread ended since the listing
        except OSError as exc:
            sys.stderr.write("stub: SCHED_BATCH for thread %d refused (%s); it keeps its policy\n" % (tid, exc))


def _confine(cpus):
    """Confines every thread of this process to cpus (the instance's host
    policy, --host-policy=<policy>,cpu-cores=<list>; every thread, see
    _threads). Returns an error text, or None. Unlike SCHED_BATCH this is no mere gain:
    a stub that cannot keep to its policy's CPUs does not start."""
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass  # the thread ended since the listing
        except OSError as exc:
            return "cannot confine the stub to CPUs %s (its host policy's cpu-cores): %s" % (
                ",".join(str(c) for c in sorted(cpus)), exc.strerror or exc)
    return None


def main(argv):
    args = argv[1:]
    memory = [a for a in args if a.startswith("--memory-bytes=")]
    sched_batch = "--sched-batch" in args
    cpus = [a for a in args if a.startswith("--cpus=")]
    args = [a for a in args if not a.startswith(("--memory-bytes=", "--cpus=")) and a != "--sched-batch"]
    if len(args) != 4:
        sys.stderr.write("usage: tritonbuild_stub.py CTL_IN_FD CTL_OUT_FD SHM_FD BELL_FD [--memory-bytes=N] "
                         "[--sched-batch] [--cpus=N,...]\n")
        return 2
    ctl_in, ctl_out, shm_fd, bell_fd = (int(a) for a in args)
    if cpus:
        err = _confine({int(c) for c in cpus[-1].split("=", 1)[1].split(",")})
        if err is not None:
            sys.stderr.write("stub: %s\n" % err)
            return 2
    if sched_batch:
        _sched_batch()
    if memory:
        _limit_memory(int(memory[-1].split("=", 1)[1]))
    # The doorbell page stays mapped for the stub's life; the descriptor
    # is not needed once it is.
    bell = memoryview(mmap.mmap(bell_fd, 4096)).cast("Q")  # doorbell.go: bellSize
    os.close(bell_fd)
    channel = Channel(ctl_in, ctl_out, bell)
    version = "%d.%d.%d" % sys.version_info[:3]
    channel.send({"op": "hello", "pid": os.getpid(), "python": version, "numpy": np.__version__,
                  "executable": sys.executable})
    stub = Stub(channel, Shm(shm_fd))
    # Before any model.py is imported: server-only pb_utils calls reach the
    # server through this link (pb_utils._server).
    pb_utils._attach_server(stub)
    return stub.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
