package toolchain_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

func TestParseCcacheStats(t *testing.T) {
	out := []byte("cache_miss\t3\ndirect_cache_hit\t10\npreprocessed_cache_hit\t2\nremote_storage_hit\t4\ncalled_for_link\t1\n")
	c, err := toolchain.ParseCcacheStats(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hits != 12 || c.Misses != 3 || c.RemoteHits != 4 || c.Uncacheable != 1 {
		t.Errorf("counts %+v", c)
	}
	if r := c.HitRate(); r < 0.79 || r > 0.81 {
		t.Errorf("hit rate %v, want 0.8", r)
	}
	for _, bad := range []string{"cache_miss three\n", "cache_miss\tx\n", "direct_cache_hit\t1\n"} {
		if _, err := toolchain.ParseCcacheStats([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCcacheEnv(t *testing.T) {
	env := strings.Join(toolchain.CcacheConfig{Dir: "/c", Remote: "http://h/c", MaxSize: "5G"}.Env("/w/x/"), "\n")
	for _, want := range []string{"CCACHE_BASEDIR=/w/x", "CCACHE_NOHASHDIR=1", "CCACHE_DIR=/c", "CCACHE_REMOTE_STORAGE=http://h/c", "CCACHE_MAXSIZE=5G", "CCACHE_COMPILERCHECK=content"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %s:\n%s", want, env)
		}
	}
	if got := (toolchain.CcacheConfig{}).Inner(); len(got) != 1 || got[0] != "ccache" {
		t.Errorf("Inner = %v", got)
	}
}

// writeCProject writes a C project of n translation units sharing a
// header, built by CMake into one program.
func writeCProject(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var srcs, calls, decls []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("unit%02d.c", i)
		srcs = append(srcs, name)
		decls = append(decls, fmt.Sprintf("int unit%02d(int);", i))
		calls = append(calls, fmt.Sprintf("unit%02d(x)", i))
		body := fmt.Sprintf(`#include "common.h"
#include <stdio.h>
static const char where[] = __FILE__;
int unit%02d(int x) {
	int acc = 0;
	for (int i = 0; i < x + %d; i++) acc += i * %d;
	return acc + (int)sizeof(where);
}
`, i, i, i+1)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	main := "#include <stdio.h>\n#include \"common.h\"\nint main(void) { int x = 3; printf(\"%d\\n\", " + strings.Join(calls, " + ") + "); return 0; }\n"
	files := map[string]string{
		"common.h":       strings.Join(decls, "\n") + "\n",
		"main.c":         main,
		"CMakeLists.txt": "cmake_minimum_required(VERSION 3.21)\nproject(fixture C)\nadd_executable(app main.c " + strings.Join(srcs, " ") + ")\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// buildInWorkDir configures and builds the project copied to work/src in
// work/build, as the builder lays a node out, with the builder's prefix
// map and the launcher chain broker -> inner... -> cc.
func buildInWorkDir(t *testing.T, exe, work string, inner []string, extraEnv []string, jobs int) toolchain.Counters {
	t.Helper()
	src, build := filepath.Join(work, "src"), filepath.Join(work, "build")
	writeCProject(t, src, 12)
	b, err := toolchain.StartBroker(context.Background(), toolchain.BrokerOptions{
		Budget: 4 << 30, TrimPrefixes: []string{src, build, work},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prefixMap := "-g -O1 -ffile-prefix-map=" + work + "=/tritonbuild/fixture"
	env := append(os.Environ(), b.Env()...)
	env = append(env, "CFLAGS="+prefixMap, "SOURCE_DATE_EPOCH=1")
	env = append(env, extraEnv...)
	run := func(dir, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run(work, "cmake", append([]string{"-G", "Ninja", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=None"},
		toolchain.Launcher{Exe: exe}.CMakeArgs(inner...)...)...)
	run(work, "ninja", "-C", build, fmt.Sprintf("-j%d", jobs))
	run(work, filepath.Join(build, "app"))
	return b.Counters()
}

// TestIntegrationCcacheAcrossWorkDirs builds the same project in two work
// dirs through broker -> ccache -> cc: the second build must hit for at
// least 90% of its compiles.
func TestIntegrationCcacheAcrossWorkDirs(t *testing.T) {
	testenv.NeedTools(t, "cmake", "ninja", "cc", "ccache")
	exe := self(t)
	ctx := context.Background()
	cfg := toolchain.CcacheConfig{Dir: filepath.Join(t.TempDir(), "ccache"), MaxSize: "1G"}
	first, second := filepath.Join(t.TempDir(), "work-a"), filepath.Join(t.TempDir(), "elsewhere", "work-b")

	buildInWorkDir(t, exe, first, cfg.Inner(), cfg.Env(first), 2)
	s1, err := cfg.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Misses < 13 {
		t.Fatalf("first build: %d misses, want every one of the 13 compiles to miss: %+v", s1.Misses, s1.Raw)
	}
	if err := cfg.ZeroStats(ctx); err != nil {
		t.Fatal(err)
	}
	buildInWorkDir(t, exe, second, cfg.Inner(), cfg.Env(second), 2)
	s2, err := cfg.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second work dir: %d hits, %d misses (%.0f%%)", s2.Hits, s2.Misses, 100*s2.HitRate())
	if s2.Hits+s2.Misses < 13 || s2.HitRate() < 0.9 {
		t.Fatalf("second build hit rate %.2f (%d hits, %d misses), want >= 0.90", s2.HitRate(), s2.Hits, s2.Misses)
	}
	// Without the work-dir settings the same second build misses: the
	// test would notice if hits came from somewhere else.
	if err := cfg.ZeroStats(ctx); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(t.TempDir(), "work-c")
	buildInWorkDir(t, exe, third, cfg.Inner(), []string{"CCACHE_DIR=" + cfg.Dir, "CCACHE_HASHDIR=1"}, 2)
	s3, err := cfg.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s3.HitRate() >= 0.9 {
		t.Errorf("without BASEDIR/NOHASHDIR the third work dir still hit %.2f: the hits are not explained by the settings", s3.HitRate())
	}
}

// TestIntegrationCcacheRemoteStorage shares objects between two machines'
// worth of local caches through ccache's HTTP remote storage, served here
// by a minimal in-memory WebDAV-style store (GET, PUT, HEAD, DELETE).
func TestIntegrationCcacheRemoteStorage(t *testing.T) {
	testenv.NeedTools(t, "cmake", "ninja", "cc", "ccache")
	exe := self(t)
	ctx := context.Background()
	var mu sync.Mutex
	blobs := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			data, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			blobs[r.URL.Path] = data
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet, http.MethodHead:
			data, ok := blobs[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			if r.Method == http.MethodGet {
				w.Write(data)
			}
		case http.MethodDelete:
			delete(blobs, r.URL.Path)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	}))
	defer srv.Close()
	remote := srv.URL + "/ccache"
	machineA := toolchain.CcacheConfig{Dir: filepath.Join(t.TempDir(), "a"), Remote: remote}
	machineB := toolchain.CcacheConfig{Dir: filepath.Join(t.TempDir(), "b"), Remote: remote}

	work := filepath.Join(t.TempDir(), "work-a")
	buildInWorkDir(t, exe, work, machineA.Inner(), machineA.Env(work), 2)
	mu.Lock()
	stored := len(blobs)
	mu.Unlock()
	if stored == 0 {
		t.Fatal("the first machine stored nothing remotely")
	}
	work = filepath.Join(t.TempDir(), "work-b")
	buildInWorkDir(t, exe, work, machineB.Inner(), machineB.Env(work), 2)
	s, err := machineB.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second machine: %d hits (%d remote), %d misses; %d objects on the server", s.Hits, s.RemoteHits, s.Misses, stored)
	if s.RemoteHits < 12 || s.HitRate() < 0.9 {
		t.Fatalf("second machine with an empty local cache: %d remote hits, rate %.2f; want >= 12 and >= 0.90", s.RemoteHits, s.HitRate())
	}
}
