// tbtorch-probe: loads op libraries in a throwaway process, in order, the
// way libtbtorch's tbt_load_library does (dlopen RTLD_NOW|RTLD_GLOBAL after
// libtorch). A library whose static initializers throw (for example a
// TORCH_LIBRARY namespace registered twice) takes the whole process down
// from inside dlopen, where no C++ handler can catch it; the Go side runs
// this probe first so that such a library fails one model's load instead of
// the server.
//
// Usage: tbtorch-probe LIB... (the libraries already loaded in the server,
// then the new one). Exit 0 when all load; otherwise one line on stderr,
// "<path>: <reason>", and exit 2 (dlopen error) or 3 (exception).

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <c10/util/Exception.h>
#include <torch/script.h>

namespace {

const char *current = "";

// Prints the exception escaping a library's initializer on one line.
[[noreturn]] void on_terminate() {
  std::string what = "unknown exception";
  try {
    std::exception_ptr e = std::current_exception();
    if (e) {
      std::rethrow_exception(e);
    }
    what = "terminated without an exception";
  } catch (const c10::Error &e) {
    what = e.what_without_backtrace();
  } catch (const std::exception &e) {
    what = e.what();
  } catch (...) {
  }
  for (char &c : what) {
    if (c == '\n') {
      c = ' ';
    }
  }
  std::fprintf(stderr, "%s: initializer threw: %s\n", current, what.c_str());
  std::fflush(stderr);
  _exit(3);
}

} // namespace

int main(int argc, char **argv) {
  std::set_terminate(on_terminate);
  // Make sure libtorch's own registrations are in place first, as in the
  // server (the linker would otherwise be free to drop the dependency).
  (void)torch::jit::getAllOperators().size();
  for (int i = 1; i < argc; i++) {
    current = argv[i];
    if (dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char *e = dlerror();
      std::fprintf(stderr, "%s: %s\n", argv[i], e != nullptr ? e : "unknown dlopen error");
      return 2;
    }
  }
  return 0;
}
