package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/images"
)

// e2eOptions steer -e2e: the README's flow measured from an empty store.
type e2eOptions struct {
	project  string // checkout to copy (git-tracked and untracked, unignored files)
	examples string // the report's examples (make_model.py)
	docker   bool   // also run the docker build peer on the built trees
}

// stepTime is one measured step of the flow.
type stepTime struct {
	name string
	d    time.Duration
}

// runE2E copies the project, points its build.yaml at an empty store and
// measures: `make all` (packages already installed are only checked; the
// Go build cache is the machine's), the assembly of the unchanged image
// from cached trees into a new output, the unchanged-input skip, docker
// load, and docker run until the first correct inference of the report's
// model on the pytorch backend. Then the --python image's size.
func runE2E(ctx context.Context, work string, o e2eOptions) error {
	examples, err := filepath.Abs(o.examples)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(examples, "make_model.py")); err != nil {
		return fmt.Errorf("-examples: %w", err)
	}
	o.examples = examples
	proj := filepath.Join(work, "project")
	store := filepath.Join(work, "store")
	if err := copyCheckout(o.project, proj); err != nil {
		return err
	}
	cfgFile := filepath.Join(proj, "build.yaml")
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgFile, append(cfg, []byte("\nstore: "+store+"\n")...), 0o644); err != nil {
		return err
	}
	var steps []stepTime
	step := func(name string, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		steps = append(steps, stepTime{name, time.Since(t0)})
		fmt.Printf("  %-54s %8.2fs\n", name, time.Since(t0).Seconds())
		return nil
	}
	tb := filepath.Join(proj, "out", "bin", "tritonbuild")
	var allOut string
	fmt.Println("fresh store, README flow:")
	if err := step("make all (tritonbuild all --profile system)", func() error {
		out, err := runIn(ctx, proj, "make", "all")
		allOut = out
		return err
	}); err != nil {
		return err
	}
	var imgOut string
	if err := step("image of unchanged trees, new output (cached layers)", func() error {
		out, err := runIn(ctx, proj, tb, "image", "--profile", "system", "--oci-layout", filepath.Join(work, "again-oci"))
		imgOut = out
		return err
	}); err != nil {
		return err
	}
	if err := step("image with unchanged inputs (outputs kept)", func() error {
		_, err := runIn(ctx, proj, tb, "image", "--profile", "system")
		return err
	}); err != nil {
		return err
	}
	// Serve the report's model on the pytorch backend from the image.
	models := filepath.Join(work, "models")
	if err := modelRepo(ctx, o.examples, models); err != nil {
		return err
	}
	tarball := filepath.Join(proj, "out", "tritonserver-image.tar")
	var loaded string
	if err := step("docker load", func() error {
		out, err := runIn(ctx, proj, "docker", "load", "-i", tarball)
		if err != nil {
			return err
		}
		m := regexp.MustCompile(`Loaded image: (\S+)`).FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("docker load printed no image name: %s", out)
		}
		loaded = m[1]
		return nil
	}); err != nil {
		return err
	}
	defer func() { _ = exec.Command("docker", "rmi", "-f", loaded).Run() }() // best effort: the run is over
	container := fmt.Sprintf("bench-images-%d", time.Now().UnixNano())
	defer func() { _ = exec.Command("docker", "rm", "-f", container).Run() }()
	if err := step("docker run until the first correct inference", func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		if _, err := runIn(ctx, proj, "docker", "run", "-d", "--name", container,
			"-p", fmt.Sprintf("127.0.0.1:%d:8000", port), "-v", models+":/models:ro", loaded); err != nil {
			return err
		}
		return firstInference(ctx, fmt.Sprintf("http://127.0.0.1:%d", port), 3*time.Minute)
	}); err != nil {
		logs, _ := exec.Command("docker", "logs", container).CombinedOutput()
		return fmt.Errorf("%w\n%s", err, logs)
	}
	var total time.Duration
	for _, s := range steps {
		if s.name != "image of unchanged trees, new output (cached layers)" && s.name != "image with unchanged inputs (outputs kept)" {
			total += s.d
		}
	}
	fmt.Printf("  %-54s %8.2fs\n", "total: make all + docker load + first inference", total.Seconds())
	size, _ := exec.Command("docker", "image", "inspect", "--format", "{{.Size}}", loaded).Output()
	fmt.Printf("serving image (make all): %s; docker reports %s bytes\n", sizeLine(allOut), strings.TrimSpace(string(size)))
	fmt.Printf("  cached re-assembly printed: %s\n", assembledLine(imgOut))

	var pyOut string
	if err := step("--python image (new base layer)", func() error {
		out, err := runIn(ctx, proj, tb, "image", "--profile", "system", "--python", "--oci-layout", filepath.Join(work, "py-oci"))
		pyOut = out
		return err
	}); err != nil {
		return err
	}
	fmt.Printf("--python image: %s\n", sizeLine(pyOut))
	if !o.docker {
		return nil
	}
	trees, err := storeTrees(store)
	if err != nil {
		return err
	}
	fmt.Println("library assembly of the built trees, with the docker build peer:")
	return run(ctx, trees, "", "", 0, false, true, filepath.Join(work, "peer"))
}

var sizeRe = regexp.MustCompile(`[0-9.]+ [KMG]iB compressed, [0-9.]+ [KMG]iB uncompressed, [0-9]+ layers`)

func sizeLine(out string) string {
	if m := sizeRe.FindString(out); m != "" {
		return m
	}
	return "(no summary printed)"
}

func assembledLine(out string) string {
	if m := regexp.MustCompile(`assembled in \S+`).FindString(out); m != "" {
		return m
	}
	return "(no timing printed)"
}

// storeTrees lists the install trees of runtime and tritonserver in store.
func storeTrees(store string) ([]images.Tree, error) {
	var trees []images.Tree
	for _, name := range []string{"runtime", "tritonserver"} {
		dirs, _ := filepath.Glob(filepath.Join(store, "nodes", name+"-*", "tree"))
		if len(dirs) != 1 {
			return nil, fmt.Errorf("store %s: want one %s tree, found %v", store, name, dirs)
		}
		trees = append(trees, images.Tree{Name: name, Version: "bench", Hash: "bench-" + name, Dir: dirs[0]})
	}
	return trees, nil
}

func runIn(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// copyCheckout copies what git would commit from src to dst.
func copyCheckout(src, dst string) error {
	out, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("listing %s's files: %w", src, err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		from := filepath.Join(src, f)
		st, err := os.Lstat(from)
		if errors.Is(err, os.ErrNotExist) || f == "" {
			continue
		}
		if err != nil {
			return err
		}
		to := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			data, err := os.ReadFile(from)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, data, st.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}

// modelRepo writes the report's model (make_model.py) as a pytorch-backend
// repository, batched like the report's tuned variant.
func modelRepo(ctx context.Context, examples, dir string) error {
	ver := filepath.Join(dir, "simple_linear_pt", "1")
	if err := os.MkdirAll(ver, 0o755); err != nil {
		return err
	}
	if _, err := runIn(ctx, dir, "/usr/bin/python3", filepath.Join(examples, "make_model.py"), filepath.Join(ver, "model.pt")); err != nil {
		return err
	}
	cfg := `name: "simple_linear_pt"
backend: "pytorch"
max_batch_size: 32
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 5 ] } ]
`
	if err := os.WriteFile(filepath.Join(dir, "simple_linear_pt", "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.Chmod(filepath.Join(ver, "model.pt"), 0o644)
}

// firstInference polls one inference until it answers 200 with five
// outputs per row.
func firstInference(ctx context.Context, base string, timeout time.Duration) error {
	body := `{"inputs":[{"name":"INPUT__0","shape":[1,10],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10]}]}`
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := client.Post(base+"/v2/models/simple_linear_pt/infer", "application/json", bytes.NewBufferString(body))
		if err == nil {
			var res struct {
				Outputs []struct {
					Data []float64 `json:"data"`
				} `json:"outputs"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&res)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && derr == nil && len(res.Outputs) == 1 && len(res.Outputs[0].Data) == 5 {
				return nil
			}
			last = fmt.Errorf("status %s (%w)", resp.Status, derr)
		} else {
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no inference within %s: %w", timeout, last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
