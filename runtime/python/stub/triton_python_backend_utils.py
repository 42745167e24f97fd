"""triton_python_backend_utils as shipped by tritonbuild's python backend.

Models import this module as ``pb_utils``. It offers the API surface that
Triton's python backend documents for model.py files (tensors, requests,
responses, errors, logging and the dtype helpers) so that existing models run
unchanged. It needs numpy and nothing else; torch is never imported here.

Tensors handed to execute() are zero-copy numpy views of the instance's shared
memory region: they stay valid until execute() returns. A model that keeps
input data across calls must copy it.

The same file is shipped for use outside the server (install trees and images
have it at backends/python/, with a wheel beside it), so that a model.py can
be imported and unit-tested in any environment with numpy: tensors, requests,
responses, errors, the logger (to stderr) and the type helpers work on plain
numpy data there. Calls that only a running server can answer go through
_server(), the one check, and raise ServerOnlyError outside it.
"""

import json
import math
import struct
import sys

import numpy as np

# TRITONSERVER_DataType values, as Tensor.triton_dtype() and the dtype helpers
# return them in Triton.
TRITONSERVER_TYPE_INVALID = 0
TRITONSERVER_TYPE_BOOL = 1
TRITONSERVER_TYPE_UINT8 = 2
TRITONSERVER_TYPE_UINT16 = 3
TRITONSERVER_TYPE_UINT32 = 4
TRITONSERVER_TYPE_UINT64 = 5
TRITONSERVER_TYPE_INT8 = 6
TRITONSERVER_TYPE_INT16 = 7
TRITONSERVER_TYPE_INT32 = 8
TRITONSERVER_TYPE_INT64 = 9
TRITONSERVER_TYPE_FP16 = 10
TRITONSERVER_TYPE_FP32 = 11
TRITONSERVER_TYPE_FP64 = 12
TRITONSERVER_TYPE_BYTES = 13
TRITONSERVER_TYPE_BF16 = 14

# Wire names (as in the KServe v2 protocol) to TRITONSERVER_DataType values.
_WIRE_TO_ENUM = {
    "BOOL": TRITONSERVER_TYPE_BOOL,
    "UINT8": TRITONSERVER_TYPE_UINT8,
    "UINT16": TRITONSERVER_TYPE_UINT16,
    "UINT32": TRITONSERVER_TYPE_UINT32,
    "UINT64": TRITONSERVER_TYPE_UINT64,
    "INT8": TRITONSERVER_TYPE_INT8,
    "INT16": TRITONSERVER_TYPE_INT16,
    "INT32": TRITONSERVER_TYPE_INT32,
    "INT64": TRITONSERVER_TYPE_INT64,
    "FP16": TRITONSERVER_TYPE_FP16,
    "FP32": TRITONSERVER_TYPE_FP32,
    "FP64": TRITONSERVER_TYPE_FP64,
    "BYTES": TRITONSERVER_TYPE_BYTES,
    "BF16": TRITONSERVER_TYPE_BF16,
}
_ENUM_TO_WIRE = {v: k for k, v in _WIRE_TO_ENUM.items()}

# Wire names to numpy dtypes. BF16 has no numpy dtype; BYTES is an object
# array whose elements are bytes.
_WIRE_TO_NUMPY = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}


_NUMPY_TO_WIRE = {dtype: name for name, dtype in _WIRE_TO_NUMPY.items()}

# The dtype a Tensor's array has for each wire type: BF16's raw bits are
# held as uint16 (see Tensor).
_HELD_AS = dict(_WIRE_TO_NUMPY, BF16=np.dtype(np.uint16))


def _wire_from_numpy(dtype):
    """Returns the wire name for a numpy dtype, or None when there is none."""
    name = _NUMPY_TO_WIRE.get(dtype)
    if name is not None:
        return name
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if dtype.kind == "b":
        return "BOOL"
    for name, candidate in _WIRE_TO_NUMPY.items():
        if name != "BYTES" and candidate.kind == dtype.kind and candidate.itemsize == dtype.itemsize:
            return name
    return None


def triton_string_to_numpy(triton_type_string):
    """Maps a config type name ("TYPE_FP32", also "FP32") to a numpy type."""
    name = str(triton_type_string)
    if name.startswith("TYPE_"):
        name = name[len("TYPE_"):]
    if name == "STRING":
        name = "BYTES"
    if name not in _WIRE_TO_NUMPY:
        raise TritonModelException("unsupported Triton data type %r" % (triton_type_string,))
    return _WIRE_TO_NUMPY[name].type


def triton_to_numpy_type(data_type):
    """Maps a TRITONSERVER_DataType value (or a wire name) to a numpy type."""
    name = _ENUM_TO_WIRE.get(data_type, data_type)
    if name not in _WIRE_TO_NUMPY:
        raise TritonModelException("unsupported Triton data type %r" % (data_type,))
    return _WIRE_TO_NUMPY[name].type


def numpy_to_triton_type(data_type):
    """Maps a numpy dtype to its TRITONSERVER_DataType value (None if none)."""
    name = _wire_from_numpy(data_type)
    return None if name is None else _WIRE_TO_ENUM[name]


def serialize_byte_tensor(input_tensor):
    """Encodes a numpy array of bytes/str elements in Triton's BYTES layout.

    Each element, in row-major order, becomes a 4-byte little-endian length
    followed by its bytes; str elements are encoded as UTF-8. Returns a 0-d
    object array holding the encoded bytes, as Triton's helper does, or an
    empty tuple for an empty tensor.
    """
    arr = np.asarray(input_tensor)
    if arr.size == 0:
        return ()
    if arr.dtype.kind not in ("O", "S", "U"):
        raise TritonModelException(
            "cannot serialize a %s tensor as BYTES: elements must be bytes or str" % arr.dtype)
    parts = []
    for item in arr.reshape(-1, order="C").tolist():
        if isinstance(item, (bytes, bytearray, memoryview)):
            data = bytes(item)
        elif isinstance(item, str):
            data = item.encode("utf-8")
        else:
            data = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor):
    """Decodes Triton's BYTES layout into a 1-D numpy object array of bytes."""
    if isinstance(encoded_tensor, np.ndarray):
        if encoded_tensor.dtype == np.object_:
            buf = b"".join(bytes(x) for x in encoded_tensor.reshape(-1).tolist())
        else:
            buf = encoded_tensor.tobytes()
    else:
        buf = encoded_tensor
    view = memoryview(buf).cast("B")
    items = []
    offset = 0
    end = len(view)
    while offset < end:
        if offset + 4 > end:
            raise TritonModelException(
                "malformed BYTES tensor: truncated length at byte %d of %d" % (offset, end))
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise TritonModelException(
                "malformed BYTES tensor: element of %d bytes at byte %d overruns %d" % (length, offset, end))
        items.append(bytes(view[offset:offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# Triton spells the encoder "serialize_byte_tensor"; accept the symmetric name.
serialize_bytes_tensor = serialize_byte_tensor


class TritonModelException(Exception):
    """Raised by this module for misuse; models may raise it too."""


class ServerOnlyError(TritonModelException):
    """A call that needs the running server was made outside it.

    It is a TritonModelException, so a model that guards server calls with
    ``except pb_utils.TritonModelException`` behaves the same in a unit test.
    """


# The server side of this process: set by tritonserver's python stub (through
# _attach_server) before it imports model.py, None in any other process (a
# unit test, a script, a notebook). Everything that needs the server reaches
# it through _server(), so that outside the server each such call fails the
# same clear way.
_server_link = None


def _attach_server(link):
    """Called once by the stub: link is what server-only calls talk to."""
    global _server_link
    _server_link = link


def in_server():
    """Whether this process is a model instance run by tritonserver."""
    return _server_link is not None


def _server(what):
    """Returns the server link, or raises ServerOnlyError naming the call."""
    if _server_link is None:
        raise ServerOnlyError(
            "%s needs the Triton server: this process is not a model instance started by "
            "tritonserver's python backend. Outside the server, Tensor, InferenceRequest and "
            "InferenceResponse construction, TritonError, Logger and the type helpers work on "
            "plain numpy data; calls that reach the server do not." % what)
    return _server_link


class TritonError:
    """An error attached to one InferenceResponse (or raised as a message)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return "TritonError(%r)" % self._message

    __str__ = message


class _DLPackCapsule:
    """Lets numpy.from_dlpack consume a bare DLPack capsule (CPU only)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


# DLPack's type codes (dlpack.h DLDataTypeCode) this module rewrites: a
# BF16 tensor is held as its raw uint16 bits, which numpy can hold, and
# its capsules say bfloat16 to their consumers (torch).
_DL_UINT, _DL_BFLOAT = 1, 4


def _dl_dtype(capsule):
    """The (code, bits, lanes) of a live "dltensor" capsule's tensor, as a
    ctypes structure that may be rewritten in place."""
    import ctypes

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("dtype", DLDataType)]

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ptr = get(capsule, b"dltensor")  # DLManagedTensor starts with its DLTensor
    return DLTensor.from_address(ptr).dtype


class Tensor:
    """A named tensor backed by a numpy array.

    For BYTES tensors the array has dtype object and holds bytes elements;
    for BF16 ones (numpy has no bfloat16) it holds the raw bits as uint16,
    reached through to_dlpack (torch.from_dlpack gives a bfloat16 tensor),
    and as_numpy refuses them, as Triton's does.
    """

    __slots__ = ("_name", "_array", "_wire")

    def __init__(self, name, data, _wire=None):
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                "Tensor %r: data must be a numpy.ndarray, got %s (torch tensors: use .numpy() "
                "or Tensor.from_dlpack)" % (name, type(data).__name__))
        wire = _wire or _wire_from_numpy(data.dtype)
        if wire is None:
            raise TritonModelException("Tensor %r: numpy dtype %s has no Triton data type" % (name, data.dtype))
        self._name = str(name)
        self._array = data
        self._wire = wire

    def name(self):
        return self._name

    def as_numpy(self):
        if self._wire == "BF16":
            raise TritonModelException(
                "Tensor %r is BF16, which numpy cannot hold: use to_dlpack() (torch.from_dlpack gives a "
                "bfloat16 tensor)" % self._name)
        return self._array

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return _WIRE_TO_ENUM[self._wire]

    def is_cpu(self):
        return True

    def to_dlpack(self):
        capsule = self._array.__dlpack__()
        if self._wire == "BF16":
            _dl_dtype(capsule).code = _DL_BFLOAT
        return capsule

    @staticmethod
    def from_dlpack(name, capsule):
        if hasattr(capsule, "__dlpack__"):
            capsule = capsule.__dlpack__()
        dtype = _dl_dtype(capsule)
        if dtype.code == _DL_BFLOAT and dtype.bits == 16 and dtype.lanes == 1:
            dtype.code = _DL_UINT  # the same bits, as numpy can take them
            return Tensor(name, np.from_dlpack(_DLPackCapsule(capsule)), "BF16")
        return Tensor(name, np.from_dlpack(_DLPackCapsule(capsule)))

    def __repr__(self):
        return "Tensor(%r, %s, shape=%s)" % (self._name, self._wire, list(self._array.shape))


def _params_dict(parameters):
    """Request or response parameters as a dict (they may be given as a JSON
    string, as Triton's parameters() returns them)."""
    if not parameters:
        return {}
    if isinstance(parameters, (str, bytes)):
        parameters = json.loads(parameters)
    if not isinstance(parameters, dict):
        raise TritonModelException("parameters must be a dict (or its JSON string), got %s"
                                   % type(parameters).__name__)
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, float, str)):
            raise TritonModelException("parameter %r: keys must be str and values bool, int, float or str" % (key,))
        if isinstance(value, float) and not math.isfinite(value):
            # Refused where it is given: JSON, which carries parameters to
            # the server, has no NaN or infinity.
            raise TritonModelException("parameter %r: %r is not a finite number" % (key, value))
    return parameters


class PreferredMemory:
    """Where BLS outputs should be placed; this server has CPU memory only."""

    def __init__(self, preferred_memory_type=0, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """The trace of a request (request.trace()), handed on to BLS requests."""

    def __init__(self, trace_id=0, context=None):
        self._trace_id = trace_id
        self._context = context

    def get_context(self):
        return self._context


class InferenceRequest:
    """One request as handed to execute(), or one built by the model for
    another model of the server (BLS: exec, async_exec)."""

    def __init__(self, model_name="", inputs=None, requested_output_names=None, request_id="",
                 correlation_id=0, flags=0, timeout=0, model_version=-1, preferred_memory=None,
                 trace=None, parameters=None, **_ignored):
        self._model_name = model_name
        self._inputs = list(inputs or [])
        self._requested = list(requested_output_names or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._parameters = parameters
        self._timeout = timeout
        self._model_version = model_version
        self._trace = trace  # built on first use: few models ask
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        # Set by the stub on requests of a model with the sequence
        # batcher's iterative_sequence, the only ones that may be
        # rescheduled.
        self._reschedulable = False
        self._rk = None  # set by the stub on requests of a decoupled model
        self._sender = None
        self._cancelled = False
        self._cancel_flag = None  # (region, offset) of the server's flag byte
        if parameters is not None:
            _params_dict(parameters)  # refuse bad parameters where they are given

    @classmethod
    def _incoming(cls, inputs, requested, request_id, parameters, rk, reschedulable, cancel_flag):
        """A request of a batch, as the stub hands it to execute: the state
        __init__ sets, in one dict. Building a batch's requests is a
        tenth of the stub's time per batch, and this is a third of what
        __init__ with its keywords costs."""
        request = cls.__new__(cls)
        request.__dict__ = dict(_INCOMING, _inputs=inputs, _requested=requested, _request_id=request_id,
                                _parameters=parameters, _rk=rk, _reschedulable=reschedulable,
                                _cancel_flag=cancel_flag)
        if parameters is not None:
            _params_dict(parameters)
        return request

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._requested

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def parameters(self):
        # A JSON string, as in Triton; built on demand since few models ask.
        if isinstance(self._parameters, str):
            return self._parameters
        return json.dumps(self._parameters or {})

    def _parameters_dict(self):
        return _params_dict(self._parameters)

    def timeout(self):
        return self._timeout

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def trace(self):
        if self._trace is None:
            self._trace = InferenceTrace()
        return self._trace

    def is_cancelled(self):
        if self._sender is not None:
            return self._sender.is_cancelled()
        flag = self._cancel_flag
        if flag is not None and not self._cancelled:
            shm, off = flag
            self._cancelled = bool(shm.base[off])
        return self._cancelled

    def _freeze_cancel(self, flag=None):
        """Keeps what the flag byte says now (flag: its value, read by the
        stub for the whole batch at once; None: read it here)."""
        if self._sender is None and self._cancel_flag is not None and not self._cancelled:
            if flag is None:
                shm, off = self._cancel_flag
                flag = shm.base[off]
            self._cancelled = bool(flag)
        self._cancel_flag = None

    def set_release_flags(self, flags):
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE and not self._reschedulable:
            raise TritonModelException(
                "Request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) is only available to models "
                "whose config enables the iterative sequence batcher (sequence_batching { iterative_sequence: true })")
        self._release_flags = flags

    def _rescheduled(self):
        return bool(self._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)

    def get_response_sender(self):
        link = _server("InferenceRequest.get_response_sender")
        if self._rk is None:
            raise TritonModelException(
                "get_response_sender is only available to models with the decoupled transaction policy "
                "(model_transaction_policy { decoupled: true })")
        if self._sender is None:
            self._sender = InferenceResponseSender(link, self._rk)
        return self._sender

    def exec(self, decoupled=False):
        """Runs this request on model_name and waits: an InferenceResponse,
        or with decoupled=True an iterator over the model's responses."""
        link = _server("InferenceRequest.exec")
        if not self._model_name:
            raise TritonModelException("InferenceRequest.exec: the request names no model_name")
        return link.bls(self, decoupled)

    def async_exec(self, decoupled=False):
        """exec as an awaitable, for async def execute."""
        import asyncio
        _server("InferenceRequest.async_exec")
        loop = asyncio.get_running_loop()
        if not decoupled:
            return loop.run_in_executor(None, self.exec, False)
        return loop.run_in_executor(None, lambda: list(self.exec(True)))


class InferenceResponseSender:
    """Sends the responses of one request of a decoupled model."""

    def __init__(self, link, rk):
        self._link = link
        self._rk = rk
        self._closed = False
        self._cancelled = False

    def send(self, response=None, flags=0):
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("Inference response must not be None unless the flags are "
                                       "TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("send expects an InferenceResponse, got %s" % type(response).__name__)
        if final:
            self._closed = True
        self._cancelled = self._link.send_response(self._rk, response, final) or self._cancelled

    def close(self):
        """Older releases' way to end a request: a final, empty send."""
        if not self._closed:
            self.send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self):
        return self._cancelled


class InferenceResponse:
    """The outputs for one request, or the error for it."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = parameters
        if parameters is not None:
            _params_dict(parameters)

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        if isinstance(self._parameters, str):
            return self._parameters
        return json.dumps(self._parameters or {})

    def _parameters_dict(self):
        return _params_dict(self._parameters)


def load_model(model_name, config="", files=None):
    """Loads (or reloads) a model of the repository; explicit model control
    mode only, as in Triton. files maps "file:<version>/<name>" to the bytes
    of a model file: the model then loads from those files alone, with
    config (required with them) as its configuration."""
    if not isinstance(config, str):
        config = json.dumps(config)
    args = {"name": model_name, "config": config}
    if files:
        import base64
        encoded = {}
        for path, data in files.items():
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TritonModelException("load_model: the content of %r must be bytes, not %s" % (path, type(data).__name__))
            encoded[str(path)] = base64.b64encode(bytes(data)).decode("ascii")
        args["files"] = encoded
    _server("load_model").call("load_model", **args)


def unload_model(model_name, unload_dependents=False):
    """Unloads a model; explicit model control mode only."""
    _server("unload_model").call("unload_model", name=model_name, unload_dependents=bool(unload_dependents))


def is_model_ready(model_name, model_version=""):
    """Whether the model (the given version, or any) is ready."""
    return bool(_server("is_model_ready").call("is_model_ready", name=model_name, version=str(model_version)))


class Metric:
    """One labelled metric of a MetricFamily (custom metrics)."""

    def __init__(self, family, labels=None, buckets=None):
        self._family = family
        labels = {str(k): str(v) for k, v in (labels or {}).items()}
        args = {"family": family._name, "labels": labels}
        if buckets is not None:
            args["buckets"] = [float(b) for b in buckets]
        self._link = _server("MetricFamily.Metric")
        self._id = self._link.call("metric", **args)

    def increment(self, value):
        self._link.call("metric_increment", id=self._id, value=float(value))

    def set(self, value):
        self._link.call("metric_set", id=self._id, value=float(value))

    def observe(self, value):
        self._link.call("metric_observe", id=self._id, value=float(value))

    def value(self):
        return float(self._link.call("metric_value", id=self._id))

    def __del__(self):
        # Garbage collection may run this anywhere, even inside the
        # channel's own locks: the link sends it with its next call.
        release = getattr(self._link, "release", None)
        if release is not None and getattr(self, "_id", None) is not None:
            release("metric_del", id=self._id)


class MetricFamily:
    """A custom metric family exported on the server's /metrics."""

    COUNTER = "COUNTER"
    GAUGE = "GAUGE"
    HISTOGRAM = "HISTOGRAM"

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException("MetricFamily kind must be pb_utils.MetricFamily.COUNTER, GAUGE or "
                                       "HISTOGRAM, got %r" % (kind,))
        self._name = str(name)
        self._kind = kind
        self._link = _server("MetricFamily")
        self._link.call("metric_family", name=self._name, description=str(description), kind=kind)

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)

    def __del__(self):
        release = getattr(self._link, "release", None)
        if release is not None:
            release("metric_family_del", name=self._name)


# Triton's module-level names of the kinds.
COUNTER = MetricFamily.COUNTER
GAUGE = MetricFamily.GAUGE
HISTOGRAM = MetricFamily.HISTOGRAM


def get_input_tensor_by_name(inference_request, name):
    """Returns the request's input tensor called name, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    """Returns the response's output tensor called name, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


class Logger:
    """Writes to the server log, which prefixes each line with the model.

    Outside the server the lines go to stderr, as "LEVEL: message".
    """

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    _verbose = False
    _labels = {INFO: "INFO", WARNING: "WARNING", ERROR: "ERROR", VERBOSE: "VERBOSE"}

    @staticmethod
    def log(msg, level=INFO):
        if level == Logger.VERBOSE and not Logger._verbose:
            return
        sys.stderr.write("%s: %s\n" % (Logger._labels.get(level, "INFO"), msg))
        sys.stderr.flush()

    @staticmethod
    def log_info(msg):
        Logger.log(msg, Logger.INFO)

    @staticmethod
    def log_warn(msg):
        Logger.log(msg, Logger.WARNING)

    @staticmethod
    def log_error(msg):
        Logger.log(msg, Logger.ERROR)

    @staticmethod
    def log_verbose(msg):
        Logger.log(msg, Logger.VERBOSE)


class ModelConfig:
    """The model configuration handed to auto_complete_config.

    It starts from the repository's config (Triton's JSON form, every field
    present); the model may fill in what is missing. The rules are Triton's:
    a setting the config states already may only be restated, not changed,
    and a conflict raises ValueError naming the model and the field.
    """

    def __init__(self, model_config):
        if isinstance(model_config, (str, bytes)):
            model_config = json.loads(model_config)
        self._model_config = model_config
        model_config.setdefault("max_batch_size", 0)
        model_config.setdefault("input", [])
        model_config.setdefault("output", [])

    def _name(self):
        return str(self._model_config.get("name", ""))

    def as_dict(self):
        return self._model_config

    def max_batch_size(self):
        return int(self._model_config.get("max_batch_size", 0))

    def set_max_batch_size(self, max_batch_size):
        current = self.max_batch_size()
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size %d, but in auto-complete-config function for "
                "model '%s' specified max_batch_size %d" % (current, self._name(), max_batch_size))
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    "Configuration specified scheduling_choice as '%s', but auto-complete-config function "
                    "for model '%s' tries to set scheduling_choice as 'dynamic_batching'" % (other, self._name()))
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input):
        self._add_io("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output):
        self._add_io("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model '%s' contains "
                    "property other than 'decoupled'." % self._name())
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            want = bool(transaction_policy_dict["decoupled"])
            # Triton's JSON always carries the field; only a true value is a
            # statement the model may not contradict.
            if policy.get("decoupled") and not want:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model '%s', which is "
                    "already set to 'True'." % self._name())
            policy["decoupled"] = want

    # The name older python_backend releases used.
    add_model_transaction_policy = set_model_transaction_policy

    def _add_io(self, kind, entry, allowed):
        if not isinstance(entry, dict):
            raise ValueError("%s in auto-complete-config function for model '%s' must be a dict, got %s"
                             % (kind, self._name(), type(entry).__name__))
        label = "%s '%s'" % (kind, entry.get("name", "")) if "name" in entry else kind
        for key in entry:
            if key not in allowed:
                raise ValueError(
                    "%s in auto-complete-config function for model '%s' contains property other than %s."
                    % (label, self._name(), ", ".join("'%s'" % a for a in allowed)))
        for key in ("name", "data_type", "dims"):
            if key not in entry:
                raise ValueError("%s in auto-complete-config function for model '%s' is missing '%s' property."
                                 % (label, self._name(), key))
        item = dict(entry)
        data_type = str(item["data_type"])
        if not data_type.startswith("TYPE_"):
            data_type = "TYPE_" + data_type
        item["data_type"] = data_type
        item["dims"] = [int(d) for d in item["dims"]]
        entries = self._model_config.setdefault(kind, [])
        for current in entries:
            if current.get("name") != item["name"]:
                continue
            have = current.get("data_type", "TYPE_INVALID")
            if have != "TYPE_INVALID" and have != data_type:
                raise ValueError("unable to load model '%s', configuration expects datatype %s for %s '%s', "
                                 "model provides %s" % (self._name(), have, kind, item["name"], data_type))
            if current.get("dims") and [int(d) for d in current["dims"]] != item["dims"]:
                raise ValueError("model '%s', tensor '%s': the model expects dims %s but the model "
                                 "configuration specifies dims %s"
                                 % (self._name(), item["name"], item["dims"], current["dims"]))
            if "optional" in item and current.get("optional", item["optional"]) != item["optional"] \
                    and current.get("optional"):
                raise ValueError("model '%s', tensor '%s': the model expects optional %s but the model "
                                 "configuration specifies optional %s"
                                 % (self._name(), item["name"], item["optional"], current["optional"]))
            current.update(item)
            return
        entries.append(item)


def get_input_config_by_name(model_config, name):
    """Returns the config entry (a dict) of the input called name, or None."""
    for entry in model_config.get("input", ()):
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    """Returns the config entry (a dict) of the output called name, or None."""
    for entry in model_config.get("output", ()):
        if entry.get("name") == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether the model config (a dict) sets the decoupled transaction policy."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


# Flags and enums of Triton's C API that models pass to or get from this
# module, with tritonserver.h's values.
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# Triton's own map of config type names to numpy types.
TRITON_STRING_TO_NUMPY = {
    "TYPE_" + ("STRING" if name == "BYTES" else name): dtype.type
    for name, dtype in _WIRE_TO_NUMPY.items()
}


# What InferenceRequest.__init__ sets by default, for _incoming (after the
# constants it uses).
_INCOMING = dict(vars(InferenceRequest()))
