// Command customop measures what a custom-operator team waits for after a
// one-line change to its op: `tritonbuild build OP` plus `tritonbuild image`
// with the store of the previous build (the op node rebuilds, every other
// tree and layer is reused), against the peer in the same run: the full
// build of the same targets and the same image into a fresh store (no
// install trees, no layer cache), as a build without tritonbuild's cache
// would do. It prints both times and their ratio.
//
// Usage:
//
//	go run ./bench/customop [-source DIR] [-work DIR] [-n 3] [-cold-gocache]
//
// It works on a snapshot of the committed tree (git archive HEAD) unless
// -source names a tree, scaffolds `tritonbuild new op benchops`, builds it
// with the system profile (the distribution's LLVM 15 and libtorch as
// externals) and scripts the example model with /usr/bin/python3. The go
// build cache is shared by both sides unless -cold-gocache gives the full
// build an empty one, which makes the peer slower still.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/scaffold"
)

const opName = "benchops"

type bench struct {
	tb      string // tritonbuild binary
	proj    string
	verbose bool
}

func main() {
	source := flag.String("source", "", "tritonbuild tree to build the server from (default: a snapshot of HEAD of the tree around the working directory)")
	work := flag.String("work", "", "work directory (default: a temporary one, removed at the end)")
	n := flag.Int("n", 3, "incremental rebuilds to time (each after its own one-line change); the median is reported")
	coldGo := flag.Bool("cold-gocache", false, "give the full build an empty go build cache too")
	verbose := flag.Bool("v", false, "print tritonbuild's output")
	flag.Parse()
	if err := runBench(*source, *work, *n, *coldGo, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "customop:", err)
		os.Exit(1)
	}
}

func runBench(source, work string, n int, coldGo, verbose bool) error {
	if n < 1 {
		return errors.New("-n must be at least 1")
	}
	if work == "" {
		dir, err := os.MkdirTemp("", "bench-customop")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	work, _ = filepath.Abs(work)
	if source == "" {
		wd, _ := os.Getwd()
		root, err := scaffold.FindSource(wd)
		if err != nil {
			return err
		}
		source = filepath.Join(work, "tritonbuild")
		if err := snapshot(root, source); err != nil {
			return err
		}
	}
	source, _ = filepath.Abs(source)
	b := &bench{tb: filepath.Join(work, "bin", "tritonbuild"), proj: filepath.Join(work, "proj"), verbose: verbose}
	if err := cmd(source, nil, verbose, "go", "build", "-o", b.tb, "./cmd/tritonbuild"); err != nil {
		return fmt.Errorf("building tritonbuild: %w", err)
	}
	if err := cmd(work, nil, verbose, b.tb, "new", "op", opName, "--dir", b.proj, "--source", source); err != nil {
		return err
	}
	warm := filepath.Join(work, "store-warm")
	cold := filepath.Join(work, "store-cold")

	fmt.Printf("custom-op rebuild benchmark (%s, system profile)\n", opName)
	start := time.Now()
	if err := b.tritonbuild(warm, nil, "all", "--no-image"); err != nil {
		return err
	}
	if err := cmd(b.proj, nil, verbose, "/usr/bin/python3", "scripts/make_model.py"); err != nil {
		return fmt.Errorf("scripting the model: %w", err)
	}
	if err := b.tritonbuild(warm, nil, "image", "--oci-layout", filepath.Join(work, "oci-first")); err != nil {
		return err
	}
	fmt.Printf("  first build + image (untimed setup)       %8.1fs\n", time.Since(start).Seconds())

	orig, err := os.ReadFile(filepath.Join(b.proj, "op", "src", opName+".cpp"))
	if err != nil {
		return err
	}
	var incs []time.Duration
	for i := 1; i <= n; i++ {
		if err := changeOneLine(b.proj, orig, i); err != nil {
			return err
		}
		start := time.Now()
		if err := b.tritonbuild(warm, nil, "build", opName); err != nil {
			return err
		}
		if err := b.tritonbuild(warm, nil, "image", "--oci-layout", filepath.Join(work, fmt.Sprintf("oci-inc-%d", i))); err != nil {
			return err
		}
		d := time.Since(start)
		incs = append(incs, d)
		fmt.Printf("  one-line change %d: build %s + image     %8.1fs\n", i, opName, d.Seconds())
	}
	sort.Slice(incs, func(i, j int) bool { return incs[i] < incs[j] })
	inc := incs[len(incs)/2]

	var env []string
	if coldGo {
		env = []string{"GOCACHE=" + filepath.Join(work, "gocache-cold")}
	}
	start = time.Now()
	if err := b.tritonbuild(cold, env, "all", "--no-image"); err != nil {
		return err
	}
	if err := b.tritonbuild(cold, env, "image", "--oci-layout", filepath.Join(work, "oci-full")); err != nil {
		return err
	}
	full := time.Since(start)
	fmt.Printf("  full build + image, fresh store           %8.1fs\n", full.Seconds())

	same, err := sameManifest(filepath.Join(work, fmt.Sprintf("oci-inc-%d", n)), filepath.Join(work, "oci-full"))
	if err != nil {
		return err
	}
	fmt.Printf("  incremental image identical to the full one: %v\n", same)
	fmt.Printf("  median incremental %.1fs, full %.1fs: full/incremental = %.1fx\n", inc.Seconds(), full.Seconds(), full.Seconds()/inc.Seconds())
	return nil
}

// tritonbuild runs one command in the project with the system profile.
func (b *bench) tritonbuild(store string, env []string, args ...string) error {
	args = append(args, "--profile", "system", "--store", store)
	if err := cmd(b.proj, env, b.verbose, b.tb, args...); err != nil {
		return fmt.Errorf("tritonbuild %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// changeOneLine rewrites the op's source as orig with the error message of
// scaled_add changed, a one-line edit that alters the compiled library; i
// makes every edit distinct.
func changeOneLine(proj string, orig []byte, i int) error {
	cpp := filepath.Join(proj, "op", "src", opName+".cpp")
	const msg = `" but b has shape "`
	if bytes.Count(orig, []byte(msg)) != 1 {
		return fmt.Errorf("%s: want exactly one line holding %s", cpp, msg)
	}
	edited := bytes.Replace(orig, []byte(msg), []byte(fmt.Sprintf(`" but b (edit %d) has shape "`, i)), 1)
	return os.WriteFile(cpp, edited, 0o644)
}

// sameManifest compares the indexes of two OCI layouts, which name the
// image by its manifest digest and tag.
func sameManifest(a, b string) (bool, error) {
	da, err := os.ReadFile(filepath.Join(a, "index.json"))
	if err != nil {
		return false, err
	}
	db, err := os.ReadFile(filepath.Join(b, "index.json"))
	if err != nil {
		return false, err
	}
	return bytes.Equal(da, db), nil
}

func cmd(dir string, env []string, verbose bool, name string, args ...string) error {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	if verbose {
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
	} else {
		c.Stdout, c.Stderr = &out, &out
	}
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 30))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// snapshot extracts HEAD of the git tree root into dir.
func snapshot(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := exec.Command("bash", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "snapshot", root, dir)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("snapshot of %s: %w\n%s", root, err, out)
	}
	return nil
}
