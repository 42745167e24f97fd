// Package toolchain owns the build host and its tools: it probes what the
// machine offers (usable CPUs, memory under cgroup v1 or v2 limits, free disk,
// tool versions), plans how many parallel jobs a build may run, and keeps
// those jobs within memory while they run.
//
// Memory is what kills big C++ builds: LLVM compile steps take 0.5-2 GiB
// each and its links far more, so "-j number of CPUs" gets processes
// OOM-killed on small machines and wastes big ones when set by hand. The
// package answers this in three layers:
//
//   - PlanJobs is a pure function from the probe and a memory profile to job
//     counts (with a human reason) for build systems that take fixed pools,
//     such as LLVM_PARALLEL_COMPILE_JOBS / LLVM_PARALLEL_LINK_JOBS.
//   - A Broker (a Unix-socket server inside the tritonbuild process) hands
//     out memory grants. Every compile and link command runs through Launch
//     (the hidden "tritonbuild launch -- cmd args" command), which asks the
//     broker for the command's expected peak memory before it execs and
//     reports the measured peak RSS afterwards. Ninja or make then run with
//     -j = CPUs while memory decides how many commands actually run.
//   - Learned Stats persist per-command peak RSS (p95 per source file, then
//     per kind), so the next build of the same recipe estimates better than
//     the recipe's declared figures.
//
// When the kernel OOM-kills a command anyway, Classify turns the failure into
// an *OOMError and RetryPolicy halves the concurrency for a re-run of the same
// build directory, giving up after log2(jobs) retries.
//
// Doctor and EnvExports serve the "tritonbuild doctor" and "tritonbuild env"
// commands: a JSON-serialisable report of what is missing (with the apt-get
// line that installs it) and the shell exports for an installed prefix.
package toolchain
