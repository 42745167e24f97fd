/*
 * tbtorch.h: a small C ABI over libtorch's TorchScript API, used by the Go
 * package runtime/torch through cgo.
 *
 * Ownership rules (the whole contract in one place):
 *   - Every function that can fail returns a tbt_status and, on failure,
 *     stores a malloc'd NUL-terminated message in *err (when err is not
 *     NULL). The caller frees it with tbt_string_free. On success *err is
 *     left untouched.
 *   - tbt_module_load returns a module the caller owns; free it with
 *     tbt_module_free. A module may be used by one thread at a time.
 *   - tbt_forward never copies input data: each tbt_tensor_in.data buffer is
 *     wrapped in place (torch::from_blob) and must stay valid and unmoved
 *     until tbt_forward returns. The module must not keep references to its
 *     inputs beyond the call (ordinary TorchScript forward() methods do not).
 *   - tbt_forward's result belongs to the module and is reused: the
 *     tbt_tensor_view array, the shapes and the data pointers it exposes stay
 *     valid until the next tbt_forward, tbt_result_release or
 *     tbt_module_free on that module (a forward allocates no result of its
 *     own). When forward() returns one of its inputs unchanged, that output's
 *     data is the caller's input buffer, so copy outputs before releasing
 *     inputs; the result never reads that buffer again.
 *   - Libraries loaded by tbt_load_library stay loaded for the life of the
 *     process: the operators they register cannot be unregistered safely.
 *   - No C++ exception ever crosses this boundary.
 */
#ifndef TBTORCH_H
#define TBTORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; only these functions export. */
#if defined(__GNUC__) || defined(__clang__)
#define TBT_API __attribute__((visibility("default")))
#else
#define TBT_API
#endif

/* Status codes; the Go side maps them to Triton's error classes. */
typedef enum {
  TBT_OK = 0,
  TBT_ERR_INVALID_ARG = 1, /* bad input from the caller (shape, dtype, count) */
  TBT_ERR_UNSUPPORTED = 2, /* a feature libtorch 1.13 lacks (e.g. UINT32) */
  TBT_ERR_NOT_FOUND = 3,   /* a file that cannot be opened */
  TBT_ERR_INTERNAL = 4     /* anything libtorch itself reported */
} tbt_status;

/* Element types, one per Triton wire type. */
typedef enum {
  TBT_BOOL = 1,
  TBT_UINT8 = 2,
  TBT_UINT16 = 3, /* rejected: libtorch 1.13 has no such type */
  TBT_UINT32 = 4, /* rejected */
  TBT_UINT64 = 5, /* rejected */
  TBT_INT8 = 6,
  TBT_INT16 = 7,
  TBT_INT32 = 8,
  TBT_INT64 = 9,
  TBT_FP16 = 10,
  TBT_FP32 = 11,
  TBT_FP64 = 12,
  TBT_BF16 = 13,
  /*
   * Triton's BYTES (TYPE_STRING): data holds numel elements, each a 4-byte
   * little-endian length followed by that many bytes. An input is passed
   * to forward() as a List[str] of its numel elements in row-major order
   * (copied; the shape is not kept), as Triton's libtorch backend does. An
   * output that forward() returns as a List[str] is a 1-D view of that
   * encoding whose shape is the list's length.
   */
  TBT_BYTES = 14
} tbt_dtype;

typedef struct tbt_module tbt_module;
typedef struct tbt_result tbt_result;

/* One input tensor, borrowed for the duration of tbt_forward. */
typedef struct {
  int32_t dtype;        /* a tbt_dtype */
  int32_t ndim;
  const int64_t *shape; /* ndim entries */
  void *data;           /* numel * element size bytes, row-major */
  int64_t nbytes;       /* checked against shape and dtype */
} tbt_tensor_in;

/* One output tensor, owned by its tbt_result. Always contiguous. */
typedef struct {
  int32_t dtype; /* a tbt_dtype */
  int32_t ndim;
  const int64_t *shape;
  const void *data;
  int64_t nbytes;
} tbt_tensor_view;

/* Options for tbt_module_load; zero values mean libtorch's defaults. */
typedef struct {
  const char *path;         /* TorchScript archive (model.pt) */
  int32_t intra_op_threads; /* applied on every forward (per OS thread in OpenMP) */
  /* Nonzero: run forward() without the graph executor's optimizations
   * (torch::jit::GraphOptimizerEnabledGuard(false)), Triton's
   * DISABLE_OPTIMIZED_EXECUTION. */
  int32_t disable_optimized_execution;
  /* Nonzero: run forward() under torch::NoGradGuard instead of
   * c10::InferenceMode (Triton's INFERENCE_MODE=false), for models that
   * mutate state that inference tensors may not touch. */
  int32_t disable_inference_mode;
} tbt_load_options;

/* Frees a message returned through an err out-parameter. NULL is ignored. */
TBT_API void tbt_string_free(char *s);

/*
 * Loads a shared library with dlopen(RTLD_NOW | RTLD_GLOBAL) so that the
 * TorchScript operators it registers are visible to modules loaded later.
 * Loading the same path again is cheap (dlopen reference counting).
 * Failure: TBT_ERR_NOT_FOUND with "loading op library <path>: <dlerror text>".
 * A C++ exception thrown by the library's static initializers cannot be
 * caught across dlopen and aborts the process; the tbtorch-probe program
 * installed beside this library lets a caller find that out in a child
 * process first (runtime/torch does).
 */
TBT_API tbt_status tbt_load_library(const char *path, char **err);

/*
 * Libraries loaded successfully by tbt_load_library so far, in load order
 * (each path once). The strings are owned by the library and stay valid for
 * the life of the process; NULL when i is out of range.
 */
TBT_API int32_t tbt_loaded_library_count(void);
TBT_API const char *tbt_loaded_library(int32_t i);

/*
 * Sets libtorch's inter-op thread pool size. libtorch allows this only once
 * per process and only before the pool starts; later calls asking for the
 * size already in effect succeed, others fail with TBT_ERR_UNSUPPORTED and a
 * message stating the size in effect. *in_effect (if not NULL) always
 * receives the size in effect after the call.
 */
TBT_API tbt_status tbt_set_inter_op_threads(int32_t n, int32_t *in_effect, char **err);

/* Loads a TorchScript module on the CPU and puts it in eval mode. */
TBT_API tbt_status tbt_module_load(const tbt_load_options *opts, tbt_module **out, char **err);

/* Frees a module. NULL is ignored. */
TBT_API void tbt_module_free(tbt_module *m);

/* Number of forward() arguments, not counting self. */
TBT_API int32_t tbt_module_num_inputs(const tbt_module *m);

/*
 * Number of forward() arguments without a default value, not counting self;
 * a caller must pass at least this many.
 */
TBT_API int32_t tbt_module_num_required_inputs(const tbt_module *m);

/*
 * Name of forward() argument i (0-based, self excluded), owned by the module;
 * NULL when i is out of range.
 */
TBT_API const char *tbt_module_input_name(const tbt_module *m, int32_t i);

/*
 * Number of outputs declared by forward()'s return type: 1 for a Tensor, N
 * for a tuple of N tensors, -1 when the schema does not say (for example a
 * List[Tensor]); the count is then known only after a forward.
 */
TBT_API int32_t tbt_module_num_outputs(const tbt_module *m);

/*
 * Runs forward() on n_inputs borrowed tensors under c10::InferenceMode
 * (or NoGradGuard, see tbt_load_options).
 * On success *out is the module's result holding the outputs, and *views /
 * *n_views (both owned by it) describe them, so that a caller reads
 * everything without further calls. The previous forward's outputs are
 * released first.
 */
TBT_API tbt_status tbt_forward(tbt_module *m, const tbt_tensor_in *inputs, int32_t n_inputs,
                       tbt_result **out, const tbt_tensor_view **views,
                       int32_t *n_views, char **err);

/*
 * Releases the module's last forward outputs early (they are otherwise
 * released by the next forward or by tbt_module_free). NULL is ignored.
 */
TBT_API void tbt_result_release(tbt_module *m);

/*
 * The file libtbtorch itself was loaded from (from dladdr), owned by the
 * library; NULL when unknown. Tests use it to find artifacts built next to it.
 */
TBT_API const char *tbt_library_path(void);

/*
 * The BLAS that libtorch's matrix products (Linear, matmul, addmm) call, as
 * the dynamic loader resolved it: sets *tuned to 1 for an implementation
 * known to be tuned (OpenBLAS, BLIS, MKL) and to 0 otherwise (netlib's
 * reference BLAS, which a distribution's libblas3 is, or one not
 * recognised). Returns its name (OpenBLAS's own configuration string, or the
 * file sgemm_ was found in), owned by the library; NULL when none is loaded.
 */
TBT_API const char *tbt_blas(int32_t *tuned);

#ifdef __cplusplus
}
#endif

#endif /* TBTORCH_H */
