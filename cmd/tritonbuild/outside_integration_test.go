package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// TestIntegrationOutsideRecipes builds recipes nobody here wrote, for real
// packages of Debian bookworm's source archive fetched with the apt source
// kind: xz-utils (autotools), zstd (CMake, depending on xz-utils for .xz
// support) and fribidi (meson). Each is installed into a prefix that
// already holds a user's file, and its installed program is run from there.
func TestIntegrationOutsideRecipes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three real packages")
	}
	testenv.NeedTools(t, "apt-get", "cc", "make", "cmake", "ninja", "meson", "patchelf")
	recipes, err := filepath.Abs("testdata/outside")
	if err != nil {
		t.Fatal(err)
	}
	proj := t.TempDir()
	store := filepath.Join(proj, "store")
	prefix := filepath.Join(proj, "prefix")
	config := "targets: [zstd, fribidi]\nprefix: prefix\nrecipes_dirs: [" + recipes + "]\n"
	if err := os.WriteFile(filepath.Join(proj, "build.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	// The user's own files in the prefix, which no install may touch.
	foreign := filepath.Join(prefix, "share", "notes.txt")
	if err := os.MkdirAll(filepath.Dir(foreign), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(foreign, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tb := func(args ...string) string {
		t.Helper()
		stdout, stderr, err := run(t, proj, append(args, "--store", store)...)
		if err != nil {
			t.Fatalf("tritonbuild %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout, stderr)
		}
		return stdout + stderr
	}
	// The recipe's source block is what `source apt` prints for it.
	block := tb("source", "apt", "xz-utils=5.4.1-1+deb12u1")
	for _, want := range []string{"apt: xz-utils\n", `apt_version: "5.4.1-1+deb12u1"`, "file: xz-utils_5.4.1.orig.tar.xz\n", "sha256: 5d9827aa1875b21c288f78864bb26d2650b436ea8d2cad364e4921eb6266a5a5\n"} {
		if !strings.Contains(block, want) {
			t.Errorf("source apt output lacks %q:\n%s", want, block)
		}
	}
	tb("build", "zstd", "fribidi")

	// A prefix this tool did not create is refused, naming what is there.
	_, stderr, err := run(t, proj, "install", "--store", store)
	if err == nil || !strings.Contains(stderr, "share/notes.txt") || !strings.Contains(stderr, "--force") {
		t.Fatalf("install into a foreign non-empty prefix: err %v, want a refusal naming share/notes.txt and --force:\n%s", err, stderr)
	}
	out := tb("install", "--force")
	if !regexp.MustCompile(`installed 3 trees \(\d+ files\)`).MatchString(out) {
		t.Errorf("install output: %s", out)
	}
	if b, err := os.ReadFile(foreign); err != nil || string(b) != "mine\n" {
		t.Fatalf("the user's file after install: %q, %v", b, err)
	}
	// A second install, now into a prefix it owns, needs no --force.
	tb("install")
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("the user's file after reinstall: %v", err)
	}

	bin := filepath.Join(prefix, "bin")
	// zstd loads its own libzstd (the system's lacks POOL_create) and,
	// through the xz-utils tree, writes .xz that the xz we built reads.
	ldd := runProgram(t, []string{"LD_TRACE_LOADED_OBJECTS=1"}, nil, filepath.Join(bin, "zstd"))
	for _, lib := range []string{"libzstd.so.1", "liblzma.so.5"} {
		m := regexp.MustCompile(regexp.QuoteMeta(lib) + ` => (\S+)`).FindStringSubmatch(ldd)
		if m == nil || filepath.Clean(m[1]) != filepath.Join(prefix, "lib", lib) {
			t.Errorf("installed zstd does not load %s from %s/lib:\n%s", lib, prefix, ldd)
		}
	}
	input := bytes.Repeat([]byte("tritonbuild builds outside recipes\n"), 1000)
	xzData := runProgram(t, nil, input, filepath.Join(bin, "zstd"), "-q", "-c", "--format=xz")
	if got := runProgram(t, nil, []byte(xzData), filepath.Join(bin, "xz"), "-d", "-c"); got != string(input) {
		t.Errorf("zstd --format=xz | xz -d changed the data (%d bytes back)", len(got))
	}
	zst := runProgram(t, nil, input, filepath.Join(bin, "zstd"), "-q", "-c", "-19")
	if got := runProgram(t, nil, []byte(zst), filepath.Join(bin, "zstd"), "-d", "-q", "-c"); got != string(input) {
		t.Errorf("zstd round trip changed the data")
	}
	// fribidi reorders a right-to-left run (Hebrew alef-bet) visually.
	if got := runProgram(t, nil, []byte("abc \u05d0\u05d1\u05d2\n"), filepath.Join(bin, "fribidi"), "--nopad", "--charset", "UTF-8"); !strings.Contains(got, "\u05d2\u05d1\u05d0") {
		t.Errorf("fribidi output %q lacks the reordered run", got)
	}

	// Every ELF file installed has only $ORIGIN-relative runpaths.
	filepath.WalkDir(prefix, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := elf.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			vals, _ := f.DynString(tag)
			for _, v := range vals {
				for _, e := range filepath.SplitList(v) {
					if !strings.HasPrefix(e, "$ORIGIN") {
						t.Errorf("%s: %s entry %q is not $ORIGIN-relative", p, tag, e)
					}
				}
			}
		}
		return nil
	})

	// The autotools build compiled at -O2 (configure's default is kept, the
	// reproducibility flags are appended).
	logs := tb("logs", "xz-utils")
	if !regexp.MustCompile(`(?m)^.*-O2 .*-ffile-prefix-map=.*-c .*liblzma`).MatchString(logs) && !regexp.MustCompile(`(?m)-O2 -g .*-ffile-prefix-map=`).MatchString(logs) {
		t.Errorf("xz-utils' build log shows no compile at -O2 with the prefix map")
	}
}

// runProgram runs an installed program with the test's environment plus
// env, feeding stdin, and returns its stdout.
func runProgram(t *testing.T, env []string, stdin []byte, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}
