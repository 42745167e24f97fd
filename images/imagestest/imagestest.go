// Package imagestest holds helpers for tests that check images with the
// real tools around them: a distribution registry server (`docker-registry`),
// the Docker engine, skopeo, umoci and chroot. It does not import package
// images, so any package's tests can use it.
//
// A missing tool ends the test through internal/testenv: skipped with the
// reason on a developer's machine, failed in CI.
package imagestest

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
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// Run runs a command and returns its stdout; a failure includes stderr.
func Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// MustRun is Run that fails the test.
func MustRun(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := Run(ctx, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Registry is a real distribution registry server started for one test.
type Registry struct {
	Addr string // host:port, plain HTTP on 127.0.0.1
	Root string // storage directory
}

// Ref names repo (with an optional :tag or @digest) in the registry.
func (r *Registry) Ref(repo string) string { return r.Addr + "/" + repo }

// StartRegistry starts `docker-registry serve` on a free local port with a
// filesystem storage root in a temporary directory, waits until /v2/
// answers, and stops it when the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return StartRegistryWith(t, RegistryOptions{})
}

// RegistryOptions configure StartRegistryWith.
type RegistryOptions struct {
	// ReadOnly starts the registry in its read-only maintenance mode: it
	// serves pulls and refuses every push, as a registry under
	// maintenance does.
	ReadOnly bool
}

// StartRegistryWith is StartRegistry with options.
func StartRegistryWith(t testing.TB, o RegistryOptions) *Registry {
	t.Helper()
	testenv.NeedTools(t, "docker-registry")
	dir := t.TempDir()
	root := filepath.Join(dir, "storage")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    readonly:
      enabled: %t
http:
  addr: %s
`, root, o.ReadOnly, addr)
		cfgFile := filepath.Join(dir, "config.yml")
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("docker-registry", "serve", cfgFile)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting docker-registry: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if err := waitHTTP("http://"+addr+"/v2/", exited, 20*time.Second); err != nil {
			cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit status says nothing
			lastErr = fmt.Errorf("docker-registry on %s: %w\n%s", addr, err, logs.String())
			continue
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit status says nothing
		})
		return &Registry{Addr: addr, Root: root}
	}
	t.Fatal(lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitHTTP(url string, exited <-chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited early: %w", err)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no answer in time")
}

// SkopeoInspect runs `skopeo inspect` on a transport reference (e.g.
// "oci:DIR:TAG", "docker://HOST/REPO@DIGEST") and decodes the answer.
func SkopeoInspect(t testing.TB, ref string, extra ...string) map[string]any {
	t.Helper()
	testenv.NeedTools(t, "skopeo")
	args := append([]string{"inspect"}, extra...)
	out := MustRun(t, "skopeo", append(args, ref)...)
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, out)
	}
	return v
}

// UmociUnpack unpacks the image tagged tag from the OCI layout at dir into
// a new bundle and returns the bundle's rootfs directory.
func UmociUnpack(t testing.TB, dir, tag string) string {
	t.Helper()
	testenv.NeedTools(t, "umoci")
	testenv.NeedRoot(t, "umoci unpack with the image's owners")
	bundle := filepath.Join(t.TempDir(), "bundle")
	MustRun(t, "umoci", "unpack", "--image", dir+":"+tag, bundle)
	return filepath.Join(bundle, "rootfs")
}

// RunChroot runs argv inside rootfs with exactly env as environment and
// returns its combined output. Like a container runtime it mounts /proc in
// the rootfs for the duration: glibc expands $ORIGIN of the main program
// through /proc/self/exe.
func RunChroot(ctx context.Context, t testing.TB, rootfs string, env []string, argv ...string) (string, error) {
	t.Helper()
	testenv.NeedTools(t, "chroot", "env")
	testenv.NeedRoot(t, "chroot")
	chroot, _ := exec.LookPath("chroot") // env -i clears PATH
	procDir := filepath.Join(rootfs, "proc")
	if err := os.MkdirAll(procDir, 0o555); err != nil {
		return "", err
	}
	if _, err := Run(ctx, "mount", "-t", "proc", "proc", procDir); err != nil {
		return "", fmt.Errorf("mounting /proc in %s: %w", rootfs, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := Run(uctx, "umount", procDir); err != nil {
			t.Errorf("unmounting %s: %v", procDir, err)
		}
	}()
	args := append([]string{"-i"}, env...)
	args = append(args, chroot, rootfs)
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, "env", args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Docker drives the local Docker engine and removes the images it loaded
// when the test ends.
type Docker struct {
	t      testing.TB
	images []string
}

// NewDocker checks that the docker CLI exists and the engine answers.
func NewDocker(t testing.TB) *Docker {
	t.Helper()
	testenv.NeedTools(t, "docker")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Run(ctx, "docker", "version", "--format", "{{.Server.Version}}"); err != nil {
		testenv.Unavailable(t, "the Docker engine does not answer: %v", err)
	}
	d := &Docker{t: t}
	t.Cleanup(func() {
		for _, img := range d.images {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if _, err := Run(ctx, "docker", "rmi", "-f", img); err != nil {
				t.Logf("cleanup: %v", err)
			}
			cancel()
		}
	})
	return d
}

// Load runs `docker load -i tarball` and returns the loaded image name.
func (d *Docker) Load(tarball string) string {
	d.t.Helper()
	out := string(MustRun(d.t, "docker", "load", "-i", tarball))
	for _, line := range strings.Split(out, "\n") {
		for _, p := range []string{"Loaded image: ", "Loaded image ID: "} {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), p); ok {
				d.images = append(d.images, s)
				return s
			}
		}
	}
	d.t.Fatalf("docker load printed no image name:\n%s", out)
	return ""
}

// Run runs the image (removed afterwards) with args and returns the
// combined output.
func (d *Docker) Run(ctx context.Context, image string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "--network", "none", image}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ImageInspect is the part of `docker image inspect` tests look at.
type ImageInspect struct {
	ID           string `json:"Id"`
	Architecture string
	Os           string
	Created      string
	Config       struct {
		User         string
		ExposedPorts map[string]struct{}
		Env          []string
		Entrypoint   []string
		Cmd          []string
		WorkingDir   string
		Labels       map[string]string
	}
}

// Inspect returns `docker image inspect image`.
func (d *Docker) Inspect(image string) ImageInspect {
	d.t.Helper()
	out := MustRun(d.t, "docker", "image", "inspect", image)
	var v []ImageInspect
	if err := json.Unmarshal(out, &v); err != nil || len(v) != 1 {
		d.t.Fatalf("docker image inspect %s: %v\n%s", image, err, out)
	}
	return v[0]
}

// PrepareRootfs makes an unpacked image's rootfs runnable with chroot the
// way a container runtime would until the test ends: /proc mounted (glibc
// resolves $ORIGIN through /proc/self/exe) and the character devices
// /dev/null, /dev/zero, /dev/random and /dev/urandom (libtorch seeds from
// /dev/urandom).
func PrepareRootfs(t testing.TB, rootfs string) {
	t.Helper()
	testenv.NeedRoot(t, "mounting /proc and making device nodes in a rootfs")
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		p := filepath.Join(rootfs, "dev", d.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			t.Fatalf("making %s: %v", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // mknod applies the umask
			t.Fatal(err)
		}
	}
	procDir := filepath.Join(rootfs, "proc")
	if err := os.MkdirAll(procDir, 0o555); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Run(ctx, "mount", "-t", "proc", "proc", procDir); err != nil {
		t.Fatalf("mounting /proc in %s: %v", rootfs, err)
	}
	t.Cleanup(func() {
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := Run(uctx, "umount", procDir); err != nil {
			t.Errorf("unmounting %s: %v", procDir, err)
		}
	})
}

// ChrootCommand returns a command running argv inside rootfs (prepared
// with PrepareRootfs) with exactly env as its environment, so nothing of
// the host's LD_LIBRARY_PATH or PATH leaks in.
func ChrootCommand(ctx context.Context, t testing.TB, rootfs string, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	testenv.NeedTools(t, "chroot", "env")
	testenv.NeedRoot(t, "chroot")
	chroot, _ := exec.LookPath("chroot") // env -i clears PATH
	args := append([]string{"-i"}, env...)
	args = append(args, chroot, rootfs)
	return exec.CommandContext(ctx, "env", append(args, argv...)...)
}
