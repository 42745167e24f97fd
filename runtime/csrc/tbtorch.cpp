// Implementation of tbtorch.h over libtorch's TorchScript API.
//
// Every exported function is a thin try/catch around C++ so that no
// exception crosses into Go; messages come from c10::Error's text without
// the C++ backtrace (which only helps someone debugging libtorch itself).

#include "tbtorch.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

struct tbt_result {
  // One per output: a tensor, or (List[str] outputs) an undefined tensor
  // and the strings in Triton's BYTES encoding in bytes[i].
  std::vector<c10::IValue> values;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> bytes;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<tbt_tensor_view> views;

  // Drops the outputs but keeps every vector's capacity for the next call.
  void clear() {
    values.clear();
    tensors.clear();
    views.clear();
  }
};

struct tbt_module {
  torch::jit::Module module;
  torch::jit::Method forward;
  int32_t intra_op_threads;
  bool optimize;
  bool inference_mode;
  std::vector<std::string> input_names;
  int32_t num_required_inputs;
  int32_t num_outputs;
  // Reused across forwards (a module is used by one thread at a time), so
  // that a forward allocates nothing of its own besides the input tensors'
  // headers: the interpreter stack ([self, inputs...], then the output) and
  // the result, whose tensors live until the next forward.
  torch::jit::Stack stack;
  tbt_result result;
  const std::unordered_map<std::string, c10::IValue> no_kwargs;

  tbt_module(torch::jit::Module m, const tbt_load_options &o)
      : module(std::move(m)), forward(module.get_method("forward")),
        intra_op_threads(o.intra_op_threads), optimize(o.disable_optimized_execution == 0),
        inference_mode(o.disable_inference_mode == 0), num_required_inputs(0), num_outputs(-1) {}
};

namespace {

char *dup_string(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p != nullptr) {
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
  }
  return p;
}

tbt_status fail(char **err, tbt_status st, const std::string &msg) {
  if (err != nullptr) {
    *err = dup_string(msg);
  }
  return st;
}

// Runs body and turns any exception into a status and message.
template <typename F>
tbt_status guarded(char **err, const std::string &what, F &&body) {
  try {
    return body();
  } catch (const c10::Error &e) {
    return fail(err, TBT_ERR_INTERNAL, what + ": " + e.what_without_backtrace());
  } catch (const std::exception &e) {
    return fail(err, TBT_ERR_INTERNAL, what + ": " + e.what());
  } catch (...) {
    return fail(err, TBT_ERR_INTERNAL, what + ": unknown C++ exception");
  }
}

const char *dtype_name(int32_t d) {
  switch (d) {
  case TBT_BOOL: return "BOOL";
  case TBT_UINT8: return "UINT8";
  case TBT_UINT16: return "UINT16";
  case TBT_UINT32: return "UINT32";
  case TBT_UINT64: return "UINT64";
  case TBT_INT8: return "INT8";
  case TBT_INT16: return "INT16";
  case TBT_INT32: return "INT32";
  case TBT_INT64: return "INT64";
  case TBT_FP16: return "FP16";
  case TBT_FP32: return "FP32";
  case TBT_FP64: return "FP64";
  case TBT_BF16: return "BF16";
  case TBT_BYTES: return "BYTES";
  }
  return "unknown";
}

// Maps a tbt_dtype to a torch scalar type; false for types libtorch lacks.
bool to_scalar_type(int32_t d, c10::ScalarType *out) {
  switch (d) {
  case TBT_BOOL: *out = c10::ScalarType::Bool; return true;
  case TBT_UINT8: *out = c10::ScalarType::Byte; return true;
  case TBT_INT8: *out = c10::ScalarType::Char; return true;
  case TBT_INT16: *out = c10::ScalarType::Short; return true;
  case TBT_INT32: *out = c10::ScalarType::Int; return true;
  case TBT_INT64: *out = c10::ScalarType::Long; return true;
  case TBT_FP16: *out = c10::ScalarType::Half; return true;
  case TBT_FP32: *out = c10::ScalarType::Float; return true;
  case TBT_FP64: *out = c10::ScalarType::Double; return true;
  case TBT_BF16: *out = c10::ScalarType::BFloat16; return true;
  }
  return false;
}

bool from_scalar_type(c10::ScalarType st, int32_t *out) {
  switch (st) {
  case c10::ScalarType::Bool: *out = TBT_BOOL; return true;
  case c10::ScalarType::Byte: *out = TBT_UINT8; return true;
  case c10::ScalarType::Char: *out = TBT_INT8; return true;
  case c10::ScalarType::Short: *out = TBT_INT16; return true;
  case c10::ScalarType::Int: *out = TBT_INT32; return true;
  case c10::ScalarType::Long: *out = TBT_INT64; return true;
  case c10::ScalarType::Half: *out = TBT_FP16; return true;
  case c10::ScalarType::Float: *out = TBT_FP32; return true;
  case c10::ScalarType::Double: *out = TBT_FP64; return true;
  case c10::ScalarType::BFloat16: *out = TBT_BF16; return true;
  default: return false;
  }
}

// Output count declared by forward()'s schema, or -1 when it does not say.
int32_t declared_outputs(const c10::FunctionSchema &schema) {
  if (schema.returns().size() != 1) {
    return -1;
  }
  const c10::TypePtr &t = schema.returns()[0].type();
  if (t->kind() == c10::TypeKind::TensorType) {
    return 1;
  }
  if (t->kind() == c10::TypeKind::TupleType) {
    return static_cast<int32_t>(t->expectRef<c10::TupleType>().elements().size());
  }
  return -1;
}

// isStringList reports whether v is a List[str] (Triton's BYTES output).
bool isStringList(const c10::IValue &v) {
  return v.isList() && v.type()->expectRef<c10::ListType>().getElementType()->kind() ==
                           c10::TypeKind::StringType;
}

// Collects the outputs of a forward() result: a Tensor or a List[str], or a
// tuple of them, or a list of tensors. Anything else is refused with its
// type in the message.
tbt_status collect_outputs(const c10::IValue &v, std::vector<c10::IValue> *out, char **err) {
  if (v.isTensor() || isStringList(v)) {
    out->push_back(v);
    return TBT_OK;
  }
  if (v.isTuple()) {
    const auto &elems = v.toTupleRef().elements();
    for (size_t i = 0; i < elems.size(); i++) {
      if (!elems[i].isTensor() && !isStringList(elems[i])) {
        return fail(err, TBT_ERR_UNSUPPORTED,
                    "forward() output " + std::to_string(i) + " is a " +
                        elems[i].type()->str() + ", not a Tensor or List[str]");
      }
      out->push_back(elems[i]);
    }
    return TBT_OK;
  }
  if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorVector()) {
      out->push_back(t);
    }
    return TBT_OK;
  }
  return fail(err, TBT_ERR_UNSUPPORTED,
              "forward() returned a " + v.type()->str() +
                  "; only a Tensor, a List[str], or a tuple of them or list of tensors is supported");
}

// Parses a BYTES input (see TBT_BYTES) of numel elements into a List[str].
tbt_status bytes_input(int32_t i, const tbt_tensor_in &in, int64_t numel,
                       c10::List<std::string> *out, char **err) {
  const char *p = static_cast<const char *>(in.data);
  int64_t left = in.nbytes;
  out->reserve(static_cast<size_t>(numel));
  for (int64_t e = 0; e < numel; e++) {
    if (left < 4) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "input " + std::to_string(i) + ": BYTES data ends before element " +
                      std::to_string(e) + " of " + std::to_string(numel));
    }
    uint32_t len = static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
                   static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8 |
                   static_cast<uint32_t>(static_cast<unsigned char>(p[2])) << 16 |
                   static_cast<uint32_t>(static_cast<unsigned char>(p[3])) << 24;
    p += 4;
    left -= 4;
    if (static_cast<int64_t>(len) > left) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "input " + std::to_string(i) + ": BYTES element " + std::to_string(e) +
                      " claims " + std::to_string(len) + " bytes, " + std::to_string(left) +
                      " remain");
    }
    out->push_back(std::string(p, len));
    p += len;
    left -= len;
  }
  if (left != 0) {
    return fail(err, TBT_ERR_INVALID_ARG,
                "input " + std::to_string(i) + ": " + std::to_string(left) +
                    " bytes after its " + std::to_string(numel) + " BYTES elements");
  }
  return TBT_OK;
}

// Writes a List[str] in Triton's BYTES encoding.
void bytes_output(const c10::IValue &v, std::string *out) {
  out->clear();
  for (const c10::IValue &e : v.toListRef()) {
    const std::string &str = e.toStringRef();
    uint32_t len = static_cast<uint32_t>(str.size());
    char head[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                    static_cast<char>((len >> 16) & 0xff), static_cast<char>((len >> 24) & 0xff)};
    out->append(head, 4);
    out->append(str);
  }
}

// Inter-op pool size chosen by this library; libtorch accepts exactly one
// set_num_interop_threads per process and, when it refuses a second one,
// still overwrites its record of the size, so later calls never reach it.
std::mutex interop_mu;

// Paths loaded by tbt_load_library, for tbt_loaded_library; the strings are
// leaked on purpose so that pointers handed out stay valid.
std::mutex loaded_mu;
std::vector<char *> loaded_libraries;
int32_t interop_set = 0; // 0: never set through this library

} // namespace

namespace {

// Runs forward() under whatever grad-mode guard the caller holds, filling
// the module's reusable result.
//
// This is Method::operator() without its two per-call costs: it takes the
// argument vector by value (a copy and an allocation per call) and opens a
// RecordFunction for the profiler, which nothing here enables. The schema
// check and the filling in of default arguments are kept.
tbt_status run_forward(tbt_module *m, const tbt_tensor_in *inputs, int32_t n_inputs,
                       tbt_result **out, const tbt_tensor_view **views, int32_t *n_views,
                       char **err) {
  // The input tensors borrow the caller's buffers: drop them on every way
  // out, including exceptions, so nothing refers to them afterwards.
  struct StackReset {
    torch::jit::Stack &stack;
    ~StackReset() { stack.clear(); }
  } reset{m->stack};
  torch::jit::Stack &stack = m->stack;
  stack.clear();
  stack.reserve(static_cast<size_t>(n_inputs) + 1);
  stack.emplace_back(m->module._ivalue());
  for (int32_t i = 0; i < n_inputs; i++) {
    const tbt_tensor_in &in = inputs[i];
    c10::ScalarType st;
    if (in.dtype != TBT_BYTES && !to_scalar_type(in.dtype, &st)) {
      return fail(err, TBT_ERR_UNSUPPORTED,
                  "input " + std::to_string(i) + ": data type " + dtype_name(in.dtype) +
                      " is not supported by libtorch 1.13");
    }
    if (in.ndim < 0 || (in.ndim > 0 && in.shape == nullptr)) {
      return fail(err, TBT_ERR_INVALID_ARG, "input " + std::to_string(i) + ": bad shape");
    }
    int64_t numel = 1;
    for (int32_t d = 0; d < in.ndim; d++) {
      if (in.shape[d] < 0) {
        return fail(err, TBT_ERR_INVALID_ARG,
                    "input " + std::to_string(i) + ": negative dimension " +
                        std::to_string(in.shape[d]));
      }
      numel *= in.shape[d];
    }
    if (in.dtype == TBT_BYTES) {
      c10::List<std::string> list;
      tbt_status bst = bytes_input(i, in, numel, &list, err);
      if (bst != TBT_OK) {
        return bst;
      }
      stack.emplace_back(std::move(list));
      continue;
    }
    int64_t want = numel * static_cast<int64_t>(c10::elementSize(st));
    if (want != in.nbytes) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "input " + std::to_string(i) + ": " + std::to_string(in.nbytes) +
                      " bytes given, shape and " + dtype_name(in.dtype) + " need " +
                      std::to_string(want));
    }
    c10::IntArrayRef shape(in.shape, static_cast<size_t>(in.ndim));
    auto options = at::TensorOptions().dtype(st).device(at::kCPU);
    // at:: rather than torch:: factories: the torch:: ones wrap the tensor
    // in a new autograd variable, which inference never uses.
    if (numel == 0 || in.data == nullptr) {
      stack.emplace_back(at::empty(shape, options));
    } else {
      // Zero copy: the tensor borrows the caller's buffer.
      stack.emplace_back(at::from_blob(in.data, shape, options));
    }
  }
  torch::jit::Function &fn = m->forward.function();
  fn.getSchema().checkAndNormalizeInputs(stack, m->no_kwargs);
  fn.run(stack);
  tbt_result &res = m->result;
  res.clear();
  tbt_status st = collect_outputs(stack.front(), &res.values, err);
  if (st != TBT_OK) {
    res.clear();
    return st;
  }
  size_t n = res.values.size();
  if (res.shapes.size() < n) {
    res.shapes.resize(n);
  }
  if (res.bytes.size() < n) {
    res.bytes.resize(n);
  }
  res.views.resize(n);
  res.tensors.resize(n);
  for (size_t i = 0; i < n; i++) {
    if (!res.values[i].isTensor()) {
      // A List[str]: its strings in Triton's encoding, owned by the result.
      tbt_tensor_view &v = res.views[i];
      bytes_output(res.values[i], &res.bytes[i]);
      res.shapes[i].assign(1, static_cast<int64_t>(res.values[i].toListRef().size()));
      v.dtype = TBT_BYTES;
      v.ndim = 1;
      v.shape = res.shapes[i].data();
      v.data = res.bytes[i].data();
      v.nbytes = static_cast<int64_t>(res.bytes[i].size());
      continue;
    }
    res.tensors[i] = res.values[i].toTensor();
    at::Tensor &t = res.tensors[i];
    if (!t.device().is_cpu()) {
      t = t.cpu();
    }
    // A copy happens only for non-contiguous outputs (views, transposes).
    t = t.contiguous();
    tbt_tensor_view &v = res.views[i];
    if (!from_scalar_type(t.scalar_type(), &v.dtype)) {
      res.clear();
      return fail(err, TBT_ERR_UNSUPPORTED,
                  "forward() output " + std::to_string(i) + " has data type " +
                      std::string(c10::toString(t.scalar_type())) +
                      ", which has no Triton equivalent");
    }
    c10::IntArrayRef sizes = t.sizes();
    res.shapes[i].assign(sizes.begin(), sizes.end());
    v.ndim = static_cast<int32_t>(t.dim());
    v.shape = res.shapes[i].data();
    v.data = t.data_ptr();
    v.nbytes = static_cast<int64_t>(t.nbytes());
  }
  *views = res.views.data();
  *n_views = static_cast<int32_t>(n);
  *out = &res;
  return TBT_OK;
}

} // namespace

extern "C" {

void tbt_string_free(char *s) { std::free(s); }

tbt_status tbt_load_library(const char *path, char **err) {
  if (path == nullptr || path[0] == '\0') {
    return fail(err, TBT_ERR_INVALID_ARG, "op library: empty path");
  }
  return guarded(err, std::string("loading op library ") + path, [&]() -> tbt_status {
    // RTLD_GLOBAL: the library's operator registrations and the symbols it
    // exports must be visible to TorchScript code loaded afterwards.
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      const char *e = dlerror();
      return fail(err, TBT_ERR_NOT_FOUND,
                  std::string("loading op library ") + path + ": " +
                      (e != nullptr ? e : "unknown dlopen error"));
    }
    // The handle is deliberately never closed (see tbtorch.h).
    std::lock_guard<std::mutex> lock(loaded_mu);
    for (const char *p : loaded_libraries) {
      if (std::strcmp(p, path) == 0) {
        return TBT_OK;
      }
    }
    loaded_libraries.push_back(strdup(path)); // never freed: see tbtorch.h
    return TBT_OK;
  });
}

int32_t tbt_loaded_library_count(void) {
  std::lock_guard<std::mutex> lock(loaded_mu);
  return static_cast<int32_t>(loaded_libraries.size());
}

const char *tbt_loaded_library(int32_t i) {
  std::lock_guard<std::mutex> lock(loaded_mu);
  if (i < 0 || static_cast<size_t>(i) >= loaded_libraries.size()) {
    return nullptr;
  }
  return loaded_libraries[i];
}

tbt_status tbt_set_inter_op_threads(int32_t n, int32_t *in_effect, char **err) {
  return guarded(err, "setting inter-op threads", [&]() -> tbt_status {
    std::lock_guard<std::mutex> lock(interop_mu);
    if (n <= 0) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "inter-op thread count must be positive, got " + std::to_string(n));
    }
    if (interop_set == 0) {
      try {
        at::set_num_interop_threads(n);
      } catch (const c10::Error &e) {
        interop_set = -1; // libtorch's own record is unreliable from here on
        if (in_effect != nullptr) {
          *in_effect = -1;
        }
        return fail(err, TBT_ERR_UNSUPPORTED,
                    std::string("libtorch refused inter-op thread count ") + std::to_string(n) +
                        ": " + e.what_without_backtrace());
      }
      interop_set = n;
    }
    if (in_effect != nullptr) {
      *in_effect = interop_set;
    }
    if (interop_set != n) {
      return fail(err, TBT_ERR_UNSUPPORTED,
                  "inter-op thread count is process-wide and already fixed at " +
                      (interop_set > 0 ? std::to_string(interop_set) : std::string("an unknown size")) +
                      "; cannot change it to " + std::to_string(n));
    }
    return TBT_OK;
  });
}

tbt_status tbt_module_load(const tbt_load_options *opts, tbt_module **out, char **err) {
  if (opts == nullptr || opts->path == nullptr || out == nullptr) {
    return fail(err, TBT_ERR_INVALID_ARG, "tbt_module_load: missing options, path or out");
  }
  std::string path(opts->path);
  return guarded(err, "loading TorchScript module " + path, [&]() -> tbt_status {
    {
      // torch::jit::load reports a missing file as a generic error; say
      // which file instead.
      FILE *f = std::fopen(path.c_str(), "rb");
      if (f == nullptr) {
        return fail(err, TBT_ERR_NOT_FOUND,
                    "loading TorchScript module " + path + ": " + std::strerror(errno));
      }
      std::fclose(f);
    }
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);
    m.eval();
    if (!m.find_method("forward")) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "TorchScript module " + path + " has no forward() method");
    }
    auto mod = std::make_unique<tbt_module>(std::move(m), *opts);
    const c10::FunctionSchema &schema = mod->forward.function().getSchema();
    const auto &args = schema.arguments();
    // arguments()[0] is self.
    for (size_t i = 1; i < args.size(); i++) {
      mod->input_names.push_back(args[i].name());
      if (!args[i].default_value().has_value()) {
        mod->num_required_inputs = static_cast<int32_t>(i);
      }
    }
    mod->num_outputs = declared_outputs(schema);
    *out = mod.release();
    return TBT_OK;
  });
}

void tbt_module_free(tbt_module *m) {
  try {
    delete m;
  } catch (...) {
    // Destructors of libtorch objects do not throw in practice; never let
    // one escape into Go if that changes.
  }
}

int32_t tbt_module_num_inputs(const tbt_module *m) {
  return static_cast<int32_t>(m->input_names.size());
}

int32_t tbt_module_num_required_inputs(const tbt_module *m) { return m->num_required_inputs; }

const char *tbt_module_input_name(const tbt_module *m, int32_t i) {
  if (i < 0 || static_cast<size_t>(i) >= m->input_names.size()) {
    return nullptr;
  }
  return m->input_names[i].c_str();
}

int32_t tbt_module_num_outputs(const tbt_module *m) { return m->num_outputs; }

tbt_status tbt_forward(tbt_module *m, const tbt_tensor_in *inputs, int32_t n_inputs,
                       tbt_result **out, const tbt_tensor_view **views, int32_t *n_views,
                       char **err) {
  if (m == nullptr || out == nullptr || views == nullptr || n_views == nullptr ||
      (n_inputs > 0 && inputs == nullptr)) {
    return fail(err, TBT_ERR_INVALID_ARG, "tbt_forward: missing module, inputs or outputs");
  }
  return guarded(err, "forward", [&]() -> tbt_status {
    int32_t have = static_cast<int32_t>(m->input_names.size());
    if (n_inputs < m->num_required_inputs || n_inputs > have) {
      return fail(err, TBT_ERR_INVALID_ARG,
                  "forward() takes " +
                      (m->num_required_inputs == have
                           ? std::to_string(have)
                           : std::to_string(m->num_required_inputs) + " to " + std::to_string(have)) +
                      " inputs, got " + std::to_string(n_inputs));
    }
    // OpenMP keeps the thread count per OS thread, and Go may run this call
    // on any thread, so check it each time (cheap) and set it when it
    // differs. Only the first forward on each thread pays: setting it also
    // rebuilds libtorch's pthreadpool.
    if (m->intra_op_threads > 0 && at::get_num_threads() != m->intra_op_threads) {
      at::set_num_threads(m->intra_op_threads);
    }
    // The optimizer switch is thread-local in libtorch, so it is set around
    // each forward rather than once at load.
    torch::jit::GraphOptimizerEnabledGuard optimize(m->optimize);
    if (m->inference_mode) {
      c10::InferenceMode guard;
      return run_forward(m, inputs, n_inputs, out, views, n_views, err);
    }
    torch::NoGradGuard guard;
    return run_forward(m, inputs, n_inputs, out, views, n_views, err);
  });
}

void tbt_result_release(tbt_module *m) {
  if (m == nullptr) {
    return;
  }
  try {
    m->result.clear();
  } catch (...) {
  }
}

const char *tbt_library_path(void) {
  static std::once_flag once;
  static std::string path;
  std::call_once(once, [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(&tbt_library_path), &info) != 0 &&
        info.dli_fname != nullptr) {
      path = info.dli_fname;
    }
  });
  return path.empty() ? nullptr : path.c_str();
}

const char *tbt_blas(int32_t *tuned) {
  static std::once_flag once;
  static std::string name;
  static int32_t known = 0;
  std::call_once(once, [] {
    // The library libtorch's sgemm_ calls bind to (the first definition in
    // the global scope), then the version call of a tuned BLAS in that
    // library or its dependencies: OpenBLAS's libblas.so.3 is a shim over
    // libopenblas.so.0. Another BLAS loaded beside it (a LAPACK's) must not
    // count.
    void *gemm = dlsym(RTLD_DEFAULT, "sgemm_");
    Dl_info info;
    if (gemm == nullptr || dladdr(gemm, &info) == 0 || info.dli_fname == nullptr) {
      return;
    }
    // The file behind the soname: the distribution's alternatives make
    // libblas.so.3 a chain of links.
    char *real = realpath(info.dli_fname, nullptr);
    name = real != nullptr ? real : info.dli_fname;
    std::free(real);
    void *lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) {
      return;
    }
    using text_fn = const char *(*)();
    using mkl_fn = void (*)(char *, int);
    if (auto f = reinterpret_cast<text_fn>(dlsym(lib, "openblas_get_config"))) {
      name = f(); // "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell MAX_THREADS=64"
      known = 1;
    } else if (auto f = reinterpret_cast<text_fn>(dlsym(lib, "bli_info_get_version_str"))) {
      name = std::string("BLIS ") + f();
      known = 1;
    } else if (auto f = reinterpret_cast<mkl_fn>(dlsym(lib, "mkl_get_version_string"))) {
      char buf[256] = {0};
      f(buf, sizeof buf - 1);
      name = buf;
      known = 1;
    }
    dlclose(lib);
  });
  if (tuned != nullptr) {
    *tuned = known;
  }
  return name.empty() ? nullptr : name.c_str();
}

} // extern "C"
