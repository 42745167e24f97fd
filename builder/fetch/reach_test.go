package fetch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

func TestReachURL(t *testing.T) {
	blob, sha := testBlob(1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			http.ServeContent(w, r, "ok", time.Unix(0, 0), strings.NewReader(string(blob)))
		case "/nohead": // a server that only answers GET
			if r.Method == http.MethodHead {
				http.Error(w, "no", http.StatusMethodNotAllowed)
				return
			}
			if r.Header.Get("Range") != "bytes=0-0" {
				t.Errorf("fallback GET asked for %q, want the first byte", r.Header.Get("Range"))
			}
			http.ServeContent(w, r, "ok", time.Unix(0, 0), strings.NewReader(string(blob)))
		case "/slow":
			// Far longer than the reach timeout; returns early once the
			// client gives up so that srv.Close does not wait for it.
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := "http://" + l.Addr().String() + "/x"
	l.Close()
	file := filepath.Join(t.TempDir(), "local.tar")
	os.WriteFile(file, blob, 0o644)

	opts := Options{ReachTimeout: 300 * time.Millisecond}
	ctx := context.Background()
	empty := Cache{Dir: t.TempDir()}
	for _, c := range []struct {
		name   string
		urls   []string
		size   int64
		ok     bool
		detail []string
	}{
		{"first that answers", []string{srv.URL + "/missing", srv.URL + "/ok"}, 1000, true, []string{"reachable at " + srv.URL + "/ok"}},
		{"GET when HEAD is refused", []string{srv.URL + "/nohead"}, 0, true, []string{"/nohead"}},
		{"file URL", []string{"file://" + file}, 0, true, []string{"file://"}},
		{"size differs", []string{srv.URL + "/ok"}, 999, false, []string{"serves 1000 bytes, want 999"}},
		{"nothing answers", []string{refused, srv.URL + "/missing", srv.URL + "/slow", "file:///nonexistent/x"}, 0,
			false, []string{"connection refused", "404 Not Found", "no answer within 300ms", "no such file"}},
	} {
		start := time.Now()
		r := ReachURL(ctx, URLSpec{URLs: c.urls, SHA256: sha, Size: c.size}, empty, opts)
		if r.OK != c.ok || r.Cached {
			t.Errorf("%s: %+v, want OK=%v", c.name, r, c.ok)
		}
		for _, d := range c.detail {
			if !strings.Contains(r.Detail, d) {
				t.Errorf("%s: detail %q lacks %q", c.name, r.Detail, d)
			}
		}
		// Generous for a loaded machine, still far below the 20 s a slow
		// mirror would hold us without the timeout.
		if el := time.Since(start); el > 8*time.Second {
			t.Errorf("%s: took %s, the timeout is 300ms per request", c.name, el)
		}
	}
	// A cached file needs nobody.
	cache := Cache{Dir: t.TempDir()}
	if _, err := cache.Adopt(ctx, sha, file, "test"); err != nil {
		t.Fatal(err)
	}
	if r := ReachURL(ctx, URLSpec{URLs: []string{refused}, SHA256: sha}, cache, opts); !r.OK || !r.Cached {
		t.Errorf("cached: %+v", r)
	}
}

func TestReachGit(t *testing.T) {
	testenv.NeedTools(t, "git")
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	os.WriteFile(filepath.Join(repo, "f"), []byte("1"), 0o644)
	git("add", "f")
	git("commit", "-q", "-m", "one")
	first := git("rev-parse", "HEAD")
	git("tag", "-a", "-m", "annotated", "v1")
	git("tag", "light")
	os.WriteFile(filepath.Join(repo, "f"), []byte("2"), 0o644)
	git("commit", "-q", "-am", "two")
	second := git("rev-parse", "HEAD")

	ctx := context.Background()
	cache := Cache{Dir: t.TempDir()}
	opts := Options{ReachTimeout: 10 * time.Second}
	for _, c := range []struct {
		spec   GitSpec
		ok     bool
		detail string
	}{
		{GitSpec{URL: repo, Tag: "v1", Commit: first}, true, "has tag v1 at the pinned commit"},
		{GitSpec{URL: repo, Tag: "light", Commit: first}, true, "has tag light at the pinned commit"},
		{GitSpec{URL: repo, Tag: "v1", Commit: second}, false, "tag v1 is at " + first + ", the recipe pins " + second},
		{GitSpec{URL: repo, Tag: "v9", Commit: first}, false, "has no tag v9"},
		{GitSpec{URL: repo, Commit: second}, true, "answers"},
		{GitSpec{URL: filepath.Join(repo, "nope"), Tag: "v1", Commit: first}, false, "unreachable: git ls-remote"},
	} {
		r := ReachGit(ctx, c.spec, cache, opts)
		if r.OK != c.ok || !strings.Contains(r.Detail, c.detail) {
			t.Errorf("%+v: %+v, want OK=%v and %q", c.spec, r, c.ok, c.detail)
		}
	}
	// A cached checkout needs no repository.
	os.MkdirAll(filepath.Join(cache.Dir, "git"), 0o755)
	os.WriteFile(gitCachePath(cache, GitSpec{Commit: first}), nil, 0o444)
	if r := ReachGit(ctx, GitSpec{URL: "/nonexistent", Tag: "v1", Commit: first}, cache, opts); !r.OK || !r.Cached {
		t.Errorf("cached: %+v", r)
	}
}

// scriptedAptURIs is an apt-get that lists a source package's files the way
// `apt-get source --print-uris` does, pointing at base.
func scriptedAptURIs(t *testing.T, base string, lines ...string) Options {
	dir := t.TempDir()
	script := "#!/bin/sh\ncase \" $* \" in\n*\" update \"*) exit 0 ;;\n*\" --print-uris \"*)\n" +
		"for a; do last=$a; done\n" +
		"if [ \"$last\" != hello=2.10-3 ]; then echo \"E: Unable to find a source package for ${last%%=*}\" >&2; exit 100; fi\n" +
		"echo 'Need to get 33 kB of source archives.'\n"
	for _, l := range lines {
		script += "echo \"" + strings.ReplaceAll(l, "BASE", base) + "\"\n"
	}
	script += "exit 0 ;;\nesac\nexit 2\n"
	bin := filepath.Join(dir, "apt-get")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Options{AptGet: bin, AptEtc: "testdata/apt/etc", ReachTimeout: 2 * time.Second, Log: newTestLog(t)}
}

func TestReachApt(t *testing.T) {
	orig, origSHA := testBlob(30_000)
	_, otherSHA := testBlob(31_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pool/hello_2.10.orig.tar.gz" {
			http.ServeContent(w, r, "x", time.Unix(0, 0), strings.NewReader(string(orig)))
			return
		}
		http.NotFound(w, r) // the mirror lacks the debian tarball
	}))
	t.Cleanup(srv.Close)
	lines := []string{
		"'BASE/pool/hello_2.10-3.dsc' hello_2.10-3.dsc 1300 SHA256:" + otherSHA,
		fmt.Sprintf("'BASE/pool/hello_2.10.orig.tar.gz' hello_2.10.orig.tar.gz %d SHA256:%s", len(orig), origSHA),
		"'BASE/pool/hello_2.10-3.debian.tar.xz' hello_2.10-3.debian.tar.xz 12000 SHA256:" + otherSHA,
	}
	opts := scriptedAptURIs(t, srv.URL, lines...)
	ctx := context.Background()
	cache := Cache{Dir: t.TempDir()}
	spec := AptSpec{Package: "hello", Version: "2.10-3", File: "hello_2.10.orig.tar.gz", SHA256: origSHA}

	if r := ReachApt(ctx, spec, cache, opts); !r.OK || !strings.Contains(r.Detail, "apt source package hello=2.10-3: reachable at "+srv.URL+"/pool/hello_2.10.orig.tar.gz") {
		t.Errorf("reachable orig tarball: %+v", r)
	}
	bad := spec
	bad.SHA256 = otherSHA
	if r := ReachApt(ctx, bad, cache, opts); r.OK || !strings.Contains(r.Detail, "the archive's hello_2.10.orig.tar.gz has sha256 "+origSHA+", the recipe pins "+otherSHA) {
		t.Errorf("pin differs from the archive: %+v", r)
	}
	deb := spec
	deb.File, deb.SHA256 = "hello_2.10-3.debian.tar.xz", otherSHA
	if r := ReachApt(ctx, deb, cache, opts); r.OK || !strings.Contains(r.Detail, "404") {
		t.Errorf("file the mirror lacks: %+v", r)
	}
	missing := spec
	missing.File = "hello_2.11.orig.tar.gz"
	if r := ReachApt(ctx, missing, cache, opts); r.OK || !strings.Contains(r.Detail, "has no file hello_2.11.orig.tar.gz") {
		t.Errorf("file not in the package: %+v", r)
	}
	unknown := spec
	unknown.Version = "9.9-1"
	if r := ReachApt(ctx, unknown, cache, opts); r.OK || !strings.Contains(r.Detail, "Unable to find a source package for hello") {
		t.Errorf("unknown version: %+v", r)
	}
}
