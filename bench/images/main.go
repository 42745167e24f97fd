// Command images measures image assembly by package images: the time to
// assemble an image from install trees with an empty layer cache (cold) and
// again with the cache of the first run (warm, the "nothing changed" rebuild),
// the time to write it as an OCI layout, and its sizes. With -docker it
// measures the peer in the same run: `docker build` of a FROM-scratch
// Dockerfile that copies the same files (the same base libraries and one COPY
// per tree), without and with the build cache, and reports the ratios.
//
// Usage:
//
//	go run ./bench/images -tree NAME=DIR [-tree NAME=DIR ...] [-entrypoint PATH] [-docker]
//	go run ./bench/images -demo [-docker]
//	go run ./bench/images -e2e [-project DIR] [-examples DIR] [-docker]
//
// -demo builds two stand-in trees on this host: a copy of the Python 3
// standard library (many small files) and a small program linked against the
// distribution's libtorch (a large library closure).
//
// -e2e follows the README on a copy of the checkout with an empty store:
// `make all` (system profile), docker load and docker run until the first
// correct inference of the report's model, the re-assembly of the unchanged
// image from cached trees, and the sizes of the serving and --python images.
// It needs root, the Docker engine and the distribution packages of the
// Makefile (already installed packages are only checked by `make deps`).
package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/images"
)

type treeFlags []images.Tree

func (t *treeFlags) String() string { return fmt.Sprint(len(*t), " trees") }
func (t *treeFlags) Set(s string) error {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=DIR, got %q", s)
	}
	*t = append(*t, images.Tree{Name: name, Version: "bench", Hash: "bench-" + name, Dir: dir})
	return nil
}

func main() {
	var trees treeFlags
	flag.Var(&trees, "tree", "install tree NAME=DIR (repeatable)")
	entrypoint := flag.String("entrypoint", "", "entrypoint inside the image (default <prefix>/bin/tritonserver)")
	models := flag.String("models", "", "model repository directory")
	level := flag.Int("level", 0, "gzip level (0 = default 6)")
	demo := flag.Bool("demo", false, "build stand-in trees on this host")
	docker := flag.Bool("docker", false, "also measure docker build as the peer")
	work := flag.String("work", "", "scratch directory (default a temporary one)")
	e2e := flag.Bool("e2e", false, "measure the README flow from an empty store")
	project := flag.String("project", ".", "checkout to copy for -e2e")
	examples := flag.String("examples", "../shared/examples", "the report's examples (make_model.py) for -e2e")
	flag.Parse()
	if *e2e {
		if err := withWork(*work, func(dir string) error {
			return runE2E(context.Background(), dir, e2eOptions{project: *project, examples: *examples, docker: *docker})
		}); err != nil {
			fmt.Fprintln(os.Stderr, "bench/images:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), trees, *entrypoint, *models, *level, *demo, *docker, *work); err != nil {
		fmt.Fprintln(os.Stderr, "bench/images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, trees []images.Tree, entrypoint, models string, level int, demo, docker bool, work string) error {
	if work == "" {
		dir, err := os.MkdirTemp("", "bench-images-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	if demo {
		var err error
		trees, entrypoint, err = demoTrees(ctx, work)
		if err != nil {
			return fmt.Errorf("demo trees: %w", err)
		}
	}
	if len(trees) == 0 {
		return errors.New("no trees: give -tree NAME=DIR or -demo")
	}
	opts := images.Options{Trees: trees, ModelRepository: models, CompressionLevel: level,
		Epoch: time.Unix(1700000000, 0), CacheDir: filepath.Join(work, "cache")}
	if entrypoint != "" {
		opts.Entrypoint = []string{entrypoint}
	}

	t0, c0 := time.Now(), cpuTime()
	cold, err := images.Assemble(ctx, opts)
	if err != nil {
		return err
	}
	coldT, coldCPU := time.Since(t0), cpuTime()-c0
	t0 = time.Now()
	if err := images.WriteLayout(ctx, cold.Image, filepath.Join(work, "oci"), "bench", images.OutputOptions{}); err != nil {
		return err
	}
	layoutT := time.Since(t0)
	t0, c0 = time.Now(), cpuTime()
	warm, err := images.Assemble(ctx, opts)
	if err != nil {
		return err
	}
	warmT, warmCPU := time.Since(t0), cpuTime()-c0
	if warm.Summary.Digest != cold.Summary.Digest {
		return fmt.Errorf("warm assembly gave %s, cold %s", warm.Summary.Digest, cold.Summary.Digest)
	}
	s := cold.Summary
	fmt.Print(s.String())
	fmt.Printf("base libraries: %d host files\n", len(s.BaseLibraries))
	fmt.Printf("tritonbuild/images  cold assemble %8.2fs  warm (unchanged) %8.3fs  layout write %6.2fs\n",
		coldT.Seconds(), warmT.Seconds(), layoutT.Seconds())
	fmt.Printf("  CPU time (user+sys): cold %.2fs, warm %.3fs on %d CPUs\n", coldCPU.Seconds(), warmCPU.Seconds(), runtime.NumCPU())
	fmt.Printf("  size: %.1f MiB compressed, %.1f MiB uncompressed\n", mib(s.CompressedSize), mib(s.UncompressedSize))
	if !docker {
		return nil
	}
	return dockerPeer(ctx, work, cold, trees, coldT, warmT)
}

// withWork runs f in work, or in a temporary directory removed afterwards.
func withWork(work string, f func(string) error) error {
	if work != "" {
		return f(work)
	}
	dir, err := os.MkdirTemp("", "bench-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return f(abs)
}

// cpuTime is the CPU time this process has used, a figure that other load
// on the machine does not inflate the way it inflates wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// dockerPeer builds the same file set with docker build, cold and warm.
func dockerPeer(ctx context.Context, work string, asm *images.Assembly, trees []images.Tree, coldT, warmT time.Duration) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("-docker: %w", err)
	}
	bctx := filepath.Join(work, "docker-context")
	var df strings.Builder
	df.WriteString("FROM scratch\n")
	layers, err := asm.Image.Layers()
	if err != nil {
		return err
	}
	for i, l := range asm.Summary.Layers {
		if l.Name != "base-libraries" {
			continue
		}
		if err := extract(layers[i], filepath.Join(bctx, "base")); err != nil {
			return fmt.Errorf("staging base libraries: %w", err)
		}
		df.WriteString("COPY base/ /\n")
	}
	for _, t := range trees {
		link := filepath.Join(bctx, "tree-"+t.Name)
		if err := exec.CommandContext(ctx, "cp", "-a", t.Dir, link).Run(); err != nil {
			return fmt.Errorf("staging %s: %w", t.Name, err)
		}
		fmt.Fprintf(&df, "COPY tree-%s/ /opt/tritonserver/\n", t.Name)
	}
	df.WriteString("USER 1000:1000\nEXPOSE 8000 8001 8002\n")
	if err := os.WriteFile(filepath.Join(bctx, "Dockerfile"), []byte(df.String()), 0o644); err != nil {
		return err
	}
	tag := fmt.Sprintf("tritonbuild-bench:%d", time.Now().UnixNano())
	defer func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() }() // best effort: the run is over
	build := func(extra ...string) (time.Duration, error) {
		args := append([]string{"build", "-q", "-t", tag}, extra...)
		cmd := exec.CommandContext(ctx, "docker", append(args, bctx)...)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("docker build: %w\n%s", err, out)
		}
		return time.Since(t0), nil
	}
	dCold, err := build("--no-cache")
	if err != nil {
		return err
	}
	dWarm, err := build()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Size}}", tag).Output()
	if err != nil {
		return fmt.Errorf("docker image inspect: %w", err)
	}
	fmt.Printf("docker build (peer) cold          %8.2fs  warm (cached)    %8.3fs  image size %s bytes uncompressed\n",
		dCold.Seconds(), dWarm.Seconds(), strings.TrimSpace(string(out)))
	fmt.Printf("ratios docker/tritonbuild: cold %.2fx, warm %.2fx (the docker figures do not include compression or export)\n",
		dCold.Seconds()/coldT.Seconds(), dWarm.Seconds()/warmT.Seconds())
	return nil
}

// extract unpacks a layer into dir (regular files, directories, symlinks).
func extract(l interface{ Uncompressed() (io.ReadCloser, error) }, dir string) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// demoTrees makes the stand-in trees of -demo and returns the entrypoint.
func demoTrees(ctx context.Context, work string) ([]images.Tree, string, error) {
	py := filepath.Join(work, "tree-python")
	if err := os.MkdirAll(filepath.Join(py, "lib"), 0o755); err != nil {
		return nil, "", err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", "/usr/lib/python3.11", filepath.Join(py, "lib", "python3.11")).CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("copying the Python standard library: %w %s", err, out)
	}
	app := filepath.Join(work, "tree-torchapp")
	src := filepath.Join(work, "torchapp.c")
	if err := os.MkdirAll(filepath.Join(app, "bin"), 0o755); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, "cc", "-o", filepath.Join(app, "bin", "tritonserver"), src, "-Wl,--no-as-needed", "-ltorch_cpu", "-lc10")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("linking a program against libtorch (libtorch-dev): %w %s", err, out)
	}
	return []images.Tree{
		{Name: "python", Version: "3.11", Hash: "demo-python", Dir: py},
		{Name: "torchapp", Version: "0", Hash: "demo-torchapp", Dir: app},
	}, "", nil
}
