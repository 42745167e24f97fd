package fetch

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// gitRepo builds real repositories for the tests: an upstream with two
// tagged commits and a submodule.
type gitRepo struct {
	t        *testing.T
	upstream string // path of the repository to clone
	c1, c2   string // commits tagged v1.0 (annotated) and v2 (lightweight)
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func newGitRepo(t *testing.T) *gitRepo {
	testenv.NeedTools(t, "git")
	// Submodules from local paths are refused by default since git
	// 2.38.1; allow them for the git processes of this test only.
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
	t.Setenv("GIT_CONFIG_VALUE_0", "always")
	root := t.TempDir()

	sub := filepath.Join(root, "sub")
	git(t, root, "init", "-q", "-b", "main", sub)
	writeFile(t, filepath.Join(sub, "lib.c"), "int lib(void) { return 1; }\n", 0o644)
	git(t, sub, "add", ".")
	git(t, sub, "commit", "-q", "-m", "sub")

	up := filepath.Join(root, "up")
	git(t, root, "init", "-q", "-b", "main", up)
	writeFile(t, filepath.Join(up, "README"), "version 1\n", 0o644)
	writeFile(t, filepath.Join(up, "tools", "build.sh"), "#!/bin/sh\necho hi\n", 0o755)
	if err := os.Symlink("tools/build.sh", filepath.Join(up, "build")); err != nil {
		t.Fatal(err)
	}
	git(t, up, "submodule", "add", "-q", sub, "third_party/sub")
	git(t, up, "add", ".")
	git(t, up, "commit", "-q", "-m", "one")
	git(t, up, "tag", "-a", "-m", "release 1.0", "v1.0")
	c1 := git(t, up, "rev-parse", "HEAD")
	writeFile(t, filepath.Join(up, "README"), "version 2\n", 0o644)
	git(t, up, "commit", "-q", "-am", "two")
	git(t, up, "tag", "v2")
	c2 := git(t, up, "rev-parse", "HEAD")
	return &gitRepo{t: t, upstream: up, c1: c1, c2: c2}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := e.Info()
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			got[rel] = "-> " + l
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
			if info.Mode()&0o100 != 0 {
				got[rel] += " (exec)"
			}
		}
		return nil
	})
	return got
}

func TestCheckoutGitTag(t *testing.T) {
	r := newGitRepo(t)
	for _, tc := range []struct {
		name string
		spec GitSpec
		want string
	}{
		{"annotated tag", GitSpec{URL: r.upstream, Tag: "v1.0", Commit: r.c1}, "version 1\n"},
		{"lightweight tag over file URL", GitSpec{URL: "file://" + r.upstream, Tag: "v2", Commit: strings.ToUpper(r.c2)}, "version 2\n"},
		{"commit only, not a branch tip", GitSpec{URL: r.upstream, Commit: r.c1}, "version 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "src")
			if err := CheckoutGit(context.Background(), tc.spec, dest, Options{Log: newTestLog(t)}); err != nil {
				t.Fatal(err)
			}
			tree := readTree(t, dest)
			want := map[string]string{
				"README":         tc.want,
				"tools/build.sh": "#!/bin/sh\necho hi\n (exec)",
				"build":          "-> tools/build.sh",
				".gitmodules":    tree[".gitmodules"],
			}
			if !strings.Contains(tree[".gitmodules"], "third_party/sub") || len(tree) != len(want) {
				t.Fatalf("tree %v", tree)
			}
			for k, v := range want {
				if tree[k] != v {
					t.Errorf("%s = %q, want %q", k, tree[k], v)
				}
			}
			if _, err := os.Stat(filepath.Join(dest, ".git")); !os.IsNotExist(err) {
				t.Errorf(".git left in the checkout: %v", err)
			}
		})
	}
}

func TestCheckoutGitWrongCommit(t *testing.T) {
	r := newGitRepo(t)
	parent := t.TempDir()
	dest := filepath.Join(parent, "src")
	err := CheckoutGit(context.Background(), GitSpec{URL: r.upstream, Tag: "v1.0", Commit: r.c2}, dest, Options{})
	var ce *CommitError
	if !errors.As(err, &ce) || ce.Want != r.c2 || ce.Got != r.c1 {
		t.Fatalf("want CommitError %s != %s, got %v", r.c2, r.c1, err)
	}
	for _, s := range []string{r.c1, r.c2, "v1.0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Fatalf("a failed checkout left %d entries beside dest", len(left))
	}
}

func TestCheckoutGitErrors(t *testing.T) {
	r := newGitRepo(t)
	for _, tc := range []struct {
		spec GitSpec
		want string
	}{
		{GitSpec{URL: r.upstream, Commit: r.c1[:12]}, "not a full 40-hex"},
		{GitSpec{URL: r.upstream, Tag: "v9", Commit: r.c1}, "v9"},
		{GitSpec{URL: filepath.Join(t.TempDir(), "nothing"), Commit: r.c1}, "nothing"},
	} {
		err := CheckoutGit(context.Background(), tc.spec, filepath.Join(t.TempDir(), "src"), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.spec, err, tc.want)
		}
	}
}

func TestCheckoutGitSubmodules(t *testing.T) {
	r := newGitRepo(t)
	dest := filepath.Join(t.TempDir(), "src")
	if err := CheckoutGit(context.Background(), GitSpec{URL: r.upstream, Tag: "v2", Commit: r.c2, Submodules: true}, dest, Options{Log: newTestLog(t)}); err != nil {
		t.Fatal(err)
	}
	tree := readTree(t, dest)
	if tree["third_party/sub/lib.c"] != "int lib(void) { return 1; }\n" {
		t.Fatalf("submodule not checked out: %v", tree)
	}
	if _, err := os.Lstat(filepath.Join(dest, "third_party", "sub", ".git")); !os.IsNotExist(err) {
		t.Fatalf("submodule .git file left: %v", err)
	}
}

func TestFetchGitDeterministicTar(t *testing.T) {
	r := newGitRepo(t)
	spec := GitSpec{URL: r.upstream, Tag: "v2", Commit: r.c2, Submodules: true}
	var tars [][]byte
	for i := 0; i < 2; i++ {
		c := Cache{Dir: t.TempDir()}
		p, err := FetchGit(context.Background(), spec, c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p != filepath.Join(c.Dir, "git", r.c2+"+submodules.tar") {
			t.Fatalf("tar at %s", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		tars = append(tars, b)
		// A cached checkout needs no git at all.
		again, err := FetchGit(context.Background(), spec, c, Options{Git: "/nonexistent/git"})
		if err != nil || again != p {
			t.Fatalf("cached FetchGit: %s, %v", again, err)
		}
		if left, _ := os.ReadDir(filepath.Join(c.Dir, "tmp")); len(left) != 0 {
			t.Fatalf("tmp/ holds %d entries", len(left))
		}
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Fatal("two fetches of one commit gave different tars")
	}
	names := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(tars[0]))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		names[h.Name] = h
	}
	for name, mode := range map[string]int64{"README": 0o644, "tools/build.sh": 0o755, "third_party/sub/lib.c": 0o644, "tools/": 0o755} {
		if h := names[name]; h == nil || h.Mode != mode {
			t.Errorf("%s: header %+v, want mode %o", name, h, mode)
		}
	}
	if h := names["build"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "tools/build.sh" {
		t.Errorf("symlink entry %+v", h)
	}
	for name := range names {
		if strings.Contains(name, ".git/") || strings.HasSuffix(name, "/.git") || name == ".git" {
			t.Errorf("git metadata in tar: %s", name)
		}
	}
}
