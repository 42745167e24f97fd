// Package torch is the libtorch (TorchScript) backend: it implements
// backend.Backend for models with `backend: "pytorch"` or
// `platform: "pytorch_libtorch"` by calling libtbtorch.so (runtime/csrc)
// through cgo. It is the server's only cgo package (the module's other one,
// internal/archive/xzpar/liblzma, is linked by tritonbuild alone).
//
// Building: the cgo implementation is compiled only with cgo enabled AND the
// build tag `libtorch`, and needs libtbtorch.so at link time:
//
//	runtime/csrc/build.sh OUT
//	CGO_LDFLAGS="-L$OUT -Wl,-rpath,$OUT" go build -tags libtorch ./cmd/tritonserver
//
// Without them the package still compiles, with the same API, and every
// model load fails with NotBuiltMessage.
//
// Model conventions (those of Triton's PyTorch backend):
//   - Inputs named `<name>__<index>` (INPUT__0) go to forward() position
//     <index>; otherwise inputs whose names equal forward()'s argument names
//     go to those positions; otherwise config order is forward() order.
//   - Outputs named `<name>__<index>` take element <index> of the returned
//     tuple; otherwise config order is tuple order.
//   - With max_batch_size > 0 the requests of one Execute are concatenated
//     along dim 0 (requests whose other dimensions differ run as separate
//     forwards) and the outputs are split back by each request's batch size.
//   - Model parameters INTRA_OP_THREAD_COUNT and INTER_OP_THREAD_COUNT set
//     libtorch's thread counts; the inter-op count is process-wide and can be
//     set once, so a later model asking for another count loads anyway and a
//     warning is logged.
//   - DISABLE_OPTIMIZED_EXECUTION=true runs forward() without the graph
//     executor's optimizations; INFERENCE_MODE=false uses NoGradGuard
//     instead of c10::InferenceMode (the default).
//   - model_operations.op_library_filename entries (ModelSpec.OpLibraries)
//     are loaded with dlopen(RTLD_NOW|RTLD_GLOBAL) before the model, after
//     the server-wide libraries given as
//     --backend-config=pytorch,op-libraries=/a.so:/b.so (a list separated by
//     the OS path-list separator, ':' on Linux). Each new library is first
//     loaded by tbtorch-probe in a child process, so that one whose
//     initializers throw fails the model's load instead of aborting the
//     server.
package torch
