// A custom TorchScript operator library used only by runtime/torch's
// integration tests: it proves that op libraries named in a model's config
// are loaded before the model, since a module calling tbtest::scale_add
// cannot even be deserialized without it.

#include <torch/library.h>
#include <torch/torch.h>

namespace {

// x * scale + 1, a result no built-in single op produces, so the test can
// tell the custom kernel ran.
at::Tensor scale_add(const at::Tensor &x, double scale) { return x * scale + 1; }

} // namespace

TORCH_LIBRARY(tbtest, m) { m.def("scale_add(Tensor x, float scale) -> Tensor", &scale_add); }
