// Command scaleoutbench measures, in one run on the real LLVM 15.0.6
// sources, what the two shared caches save on a cold build of the
// llvm-tblgen target (a store node built by tritonbuild's executor, with
// the memory broker in the launcher chain):
//
//	fill     build in store A through broker -> ccache -> cc, empty ccache
//	push     upload store A's tree to a local registry (binary cache)
//	warm     build in store B (another work dir) with the ccache filled by A
//	plain    build in store C without ccache (broker -> cc)
//	pull     empty store A's root and build again with the registry as the
//	         binary cache: plan, ask and pull instead of building
//
// and prints plain/warm (what a warm ccache from another work dir saves)
// and plain/pull (hydrating a store from the registry instead of building).
//
//	go run ./bench/scaleout -tarball /work/cache/llvm-src/llvm-toolchain-15_15.0.6.orig.tar.xz
//
// It needs cmake, ninja, cc/c++, ccache, tar and docker-registry, ~4 GB of
// disk under -dir, and takes ~15 minutes on 2 cores.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/remote"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

const tblgenRecipe = `name: tblgen
description: LLVM's llvm-tblgen alone, for the scale-out benchmark
license: Apache-2.0 WITH LLVM-exception
versions:
  - version: "15.0.6"
    source:
      local: "{{SRC}}"
      exclude: [llvm/test, llvm/unittests, llvm/docs, llvm/benchmarks, llvm/examples]
build:
  cmake:
    generator: Ninja
    source_dir: llvm
    build_type: Release
    targets: [llvm-tblgen]
    install_components: [llvm-tblgen]
    defines:
      LLVM_TARGETS_TO_BUILD: X86
      LLVM_INCLUDE_TESTS: "OFF"
      LLVM_INCLUDE_BENCHMARKS: "OFF"
      LLVM_INCLUDE_EXAMPLES: "OFF"
      LLVM_INCLUDE_DOCS: "OFF"
      LLVM_ENABLE_ZLIB: "OFF"
      LLVM_ENABLE_ZSTD: "OFF"
      LLVM_ENABLE_TERMINFO: "OFF"
      LLVM_ENABLE_LIBXML2: "OFF"
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "launch" {
		// The build tools call back into this binary as the launcher.
		os.Exit(toolchain.Launch(context.Background(), os.Args[2:], os.Environ()))
	}
	tarball := flag.String("tarball", "/work/cache/llvm-src/llvm-toolchain-15_15.0.6.orig.tar.xz", "LLVM 15.0.6 orig tarball (Debian's llvm-toolchain-15 source)")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "scaleout-bench"), "work directory (sources, stores, ccache, registry)")
	jobs := flag.Int("jobs", 2, "build jobs")
	flag.Parse()
	if err := run(context.Background(), *tarball, *dir, *jobs); err != nil {
		fmt.Fprintln(os.Stderr, "scaleoutbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	dir     string
	recipes string
	jobs    int
	exe     string
	host    *toolchain.Host
}

func run(ctx context.Context, tarball, dir string, jobs int) error {
	b := &bench{dir: dir, jobs: jobs}
	var err error
	if b.exe, err = os.Executable(); err != nil {
		return err
	}
	if b.host, err = toolchain.Probe(ctx, toolchain.ProbeOptions{Tools: []string{}}); err != nil {
		return err
	}
	src := filepath.Join(dir, "src")
	if err := extractLLVM(ctx, tarball, src); err != nil {
		return err
	}
	b.recipes = filepath.Join(dir, "recipes")
	if err := os.MkdirAll(b.recipes, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.recipes, "tblgen.yaml"), []byte(strings.ReplaceAll(tblgenRecipe, "{{SRC}}", src)), 0o644); err != nil {
		return err
	}
	for _, d := range []string{"a", "b", "c", "ccache", "registry"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	addr, stop, err := startRegistry(filepath.Join(dir, "registry"))
	if err != nil {
		return err
	}
	defer stop()
	cache := &remote.Cache{Ref: addr + "/bench/tritonbuild-cache", Options: remote.Options{Insecure: true}}
	ccache := &recipe.CcacheSettings{Dir: filepath.Join(dir, "ccache"), MaxSize: "5G"}
	cc := ccache.Config(dir)

	fill, resA, storeA, err := b.build(ctx, "fill", filepath.Join(dir, "a"), ccache, nil)
	if err != nil {
		return err
	}
	fillStats, _ := cc.Stats(ctx)
	t0 := time.Now()
	ex := &builder.Executor{Store: storeA, Cache: cache, Out: os.Stderr}
	if n, err := ex.Push(ctx, resA.Plan.Nodes); err != nil || n != 1 {
		return fmt.Errorf("push: %d nodes, %w", n, err)
	}
	push := time.Since(t0)
	if err := cc.ZeroStats(ctx); err != nil {
		return err
	}
	warm, _, _, err := b.build(ctx, "warm", filepath.Join(dir, "b"), ccache, nil)
	if err != nil {
		return err
	}
	warmStats, err := cc.Stats(ctx)
	if err != nil {
		return err
	}
	plain, _, _, err := b.build(ctx, "plain", filepath.Join(dir, "c"), nil, nil)
	if err != nil {
		return err
	}

	// Hydrate store A's root, emptied: the same build, with the cache.
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		return err
	}
	pull, res, st, err := b.build(ctx, "pull", filepath.Join(dir, "a"), nil, cache)
	if err != nil {
		return err
	}
	if res.Pulled != 1 || res.Built != 0 {
		return fmt.Errorf("pull: %d trees pulled and %d built, want 1 and 0", res.Pulled, res.Built)
	}
	node := res.Plan.Node("tblgen")
	tblgen := filepath.Join(st.TreeDir(node.Key()), "bin", "llvm-tblgen")
	out, err := exec.CommandContext(ctx, tblgen, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pulled llvm-tblgen does not run: %w: %s", err, out)
	}
	m, err := st.Manifest(node.Key())
	if err != nil {
		return err
	}

	fmt.Printf("\nscale-out benchmark: llvm-tblgen of LLVM 15.0.6, %d jobs, %d CPUs\n", jobs, b.host.CPU.Usable)
	fmt.Printf("  fill  (ccache, empty cache)        %8.1f s   ccache: %d hits, %d misses\n", fill.Seconds(), fillStats.Hits, fillStats.Misses)
	fmt.Printf("  warm  (ccache filled from store A) %8.1f s   ccache: %d hits, %d misses (%.1f%%)\n", warm.Seconds(), warmStats.Hits, warmStats.Misses, 100*warmStats.HitRate())
	fmt.Printf("  plain (no ccache)                  %8.1f s\n", plain.Seconds())
	fmt.Printf("  push  (store A -> registry)        %8.1f s\n", push.Seconds())
	fmt.Printf("  pull  (registry -> empty store)    %8.1f s   %d files, %s\n", pull.Seconds(), len(m.Files), m.Digest[:19])
	fmt.Printf("ratios:\n")
	fmt.Printf("  plain / warm ccache  = %.1fx\n", plain.Seconds()/warm.Seconds())
	fmt.Printf("  fill / plain         = %.2fx (ccache's cost on a cold cache)\n", fill.Seconds()/plain.Seconds())
	fmt.Printf("  plain / pull         = %.1fx (hydrating the store vs building)\n", plain.Seconds()/pull.Seconds())
	return nil
}

// build runs what `tritonbuild build tblgen` runs (builder's Project.Build:
// plan, jobs, the memory broker in the launcher chain, with ccache when
// given, pulling from cache when given) in a new store at root. The time
// covers planning (hashing the local source), the source copy, configure,
// build and install, or the pull.
func (b *bench) build(ctx context.Context, label, root string, ccache *recipe.CcacheSettings, cache builder.TreeCache) (time.Duration, *builder.BuildResult, *store.Store, error) {
	fmt.Fprintf(os.Stderr, "== %s: building in %s\n", label, root)
	start := time.Now()
	st, err := store.Open(root)
	if err != nil {
		return 0, nil, nil, err
	}
	set, err := recipe.Load(recipe.OSDir(b.recipes))
	if err != nil {
		return 0, nil, nil, err
	}
	p := &builder.Project{Recipes: set, Store: st, Dir: b.dir,
		Settings: recipe.Settings{Targets: []string{"tblgen"}, Cache: recipe.CacheSettings{Ccache: ccache}}}
	res, err := p.Build(ctx, builder.BuildOptions{Host: b.host, Exe: b.exe, Jobs: b.jobs, Cache: cache, Out: os.Stderr})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s build: %w", label, err)
	}
	d := time.Since(start)
	fmt.Fprintf(os.Stderr, "== %s: %.1f s\n", label, d.Seconds())
	return d, res, st, nil
}

// extractLLVM unpacks the parts of the tree an llvm-only build reads.
func extractLLVM(ctx context.Context, tarball, dest string) error {
	if _, err := os.Stat(filepath.Join(dest, "llvm", "CMakeLists.txt")); err == nil {
		return nil
	}
	if _, err := os.Stat(tarball); err != nil {
		return fmt.Errorf("LLVM tarball: %w (fetch llvm-toolchain-15 15.0.6 source with the apt fetcher)", err)
	}
	tmp := dest + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	top := "llvm-toolchain-15_15.0.6"
	cmd := exec.CommandContext(ctx, "tar", "-xJf", tarball, "-C", tmp, "--strip-components=1",
		"--exclude="+top+"/llvm/test", "--exclude="+top+"/llvm/unittests",
		top+"/llvm", top+"/cmake", top+"/third-party")
	cmd.Stderr = os.Stderr
	fmt.Fprintf(os.Stderr, "== extracting %s\n", tarball)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("extracting %s: %w", tarball, err)
	}
	return os.Rename(tmp, dest)
}

// startRegistry runs docker-registry on a free loopback port with its
// storage under dir.
func startRegistry(dir string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "storage"), addr)
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("docker-registry", "serve", cfgFile)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting docker-registry: %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() } // the registry is ours; its exit status says nothing
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("docker-registry on %s never answered: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
