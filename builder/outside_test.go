package builder

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/testenv"
)

// The regression tests of issue 16: defects found when recipes nobody here
// wrote met the engine. Each builds a tiny local project hermetically.

// miniProject is a recipe directory with local sources next to it.
type miniProject struct {
	t       *testing.T
	dir     string
	store   *store.Store
	targets []string
}

func newMiniProject(t *testing.T, files map[string]string) *miniProject {
	t.Helper()
	testenv.NeedTools(t, "cc", "make", "bash")
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "configure") || strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return &miniProject{t: t, dir: dir, store: st}
}

func (m *miniProject) plan(st *store.Store, force ...string) *Plan {
	m.t.Helper()
	set, err := recipe.Load(recipe.OSDir(filepath.Join(m.dir, "recipes")))
	if err != nil {
		m.t.Fatal(err)
	}
	p, err := MakePlan(context.Background(), set, PlanOptions{Settings: recipe.Settings{Targets: m.targets}, Store: st, Force: force, HostCompiler: "test-cc"})
	if err != nil {
		m.t.Fatal(err)
	}
	return p
}

func (m *miniProject) build(st *store.Store, force ...string) (*Plan, string, error) {
	m.t.Helper()
	p := m.plan(st, force...)
	var out bytes.Buffer
	ex := &Executor{Store: st, Out: &out, Jobs: 2}
	err := ex.Run(context.Background(), p, p.Nodes)
	return p, out.String(), err
}

func (m *miniProject) mustBuild(st *store.Store, force ...string) *Plan {
	m.t.Helper()
	p, out, err := m.build(st, force...)
	if err != nil {
		m.t.Fatalf("build: %v\n%s", err, out)
	}
	return p
}

// An autotools-like project: configure records its argv, make records the
// flags it compiled with (a Makefile's own `CFLAGS ?= -O0` must lose to the
// toolchain's default but an env CFLAGS of the recipe must win).
var argvProject = map[string]string{
	"recipes/argv.yaml": `name: argv
versions:
  - version: "1.0"
    source: {local: ../src}
options:
  disable: {type: list, default: [--disable-a, --disable-b]}
  none: {type: list, default: []}
build:
  make:
    configure: [./configure, "--prefix=${prefix}", "${options.disable}", "${options.none}", "--with=${options.disable}"]
    args: ["${options.none}"]
`,
	"src/configure": "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done > args.txt\n",
	"src/Makefile": `CFLAGS ?= -O0
all:
	echo "$(CFLAGS)" > cflags.txt
	echo "$(CXXFLAGS)" > cxxflags.txt
install:
	mkdir -p $(DESTDIR)$(prefix)/share
	cp args.txt cflags.txt cxxflags.txt $(DESTDIR)$(prefix)/share/
`,
}

// Defect 5: a list option inside an argv list is one argument per item,
// and an empty list is no argument at all.
func TestListOptionExpandsToSeparateArgs(t *testing.T) {
	m := newMiniProject(t, argvProject)
	m.targets = []string{"argv"}
	p := m.mustBuild(m.store)
	got, err := os.ReadFile(filepath.Join(m.store.TreeDir(p.Node("argv").Key()), "share", "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "[--prefix=" + m.store.TreeDir(p.Node("argv").Key()) + "]\n[--disable-a]\n[--disable-b]\n[--with=--disable-a --disable-b]\n"
	if string(got) != want {
		t.Errorf("configure saw\n%s\nwant\n%s", got, want)
	}
}

// Defect 3: make/autotools/script builds compile at -O2 -g by default,
// with the reproducibility flags appended; a recipe's CFLAGS replaces the
// default but not the reproducibility flags.
func TestDefaultOptimizationFlags(t *testing.T) {
	m := newMiniProject(t, argvProject)
	m.targets = []string{"argv"}
	p := m.mustBuild(m.store)
	share := filepath.Join(m.store.TreeDir(p.Node("argv").Key()), "share")
	for _, f := range []string{"cflags.txt", "cxxflags.txt"} {
		got, _ := os.ReadFile(filepath.Join(share, f))
		if !strings.HasPrefix(string(got), "-O2 -g -ffile-prefix-map=") {
			t.Errorf("%s = %q, want -O2 -g then the prefix maps", f, got)
		}
	}
	recipe := strings.Replace(argvProject["recipes/argv.yaml"], "build:\n", "env:\n  CFLAGS: -O1 -fno-plt\nbuild:\n", 1)
	m2 := newMiniProject(t, map[string]string{"recipes/argv.yaml": recipe, "src/configure": argvProject["src/configure"], "src/Makefile": argvProject["src/Makefile"]})
	m2.targets = []string{"argv"}
	p2 := m2.mustBuild(m2.store)
	got, _ := os.ReadFile(filepath.Join(m2.store.TreeDir(p2.Node("argv").Key()), "share", "cflags.txt"))
	if !strings.HasPrefix(string(got), "-O1 -fno-plt -ffile-prefix-map=") || strings.Contains(string(got), "-O2") {
		t.Errorf("recipe CFLAGS -O1 -fno-plt: got %q", got)
	}
}

// Defect 2: --force rebuilds a cached node and replaces its tree.
func TestForceRebuildReplacesTree(t *testing.T) {
	m := newMiniProject(t, argvProject)
	m.targets = []string{"argv"}
	p := m.mustBuild(m.store)
	tree := m.store.TreeDir(p.Node("argv").Key())
	marker := filepath.Join(tree, "share", "old-attempt")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p2 := m.mustBuild(m.store, "argv")
	if p2.Node("argv").Hash != p.Node("argv").Hash {
		t.Fatal("hash changed")
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the forced rebuild kept the old tree (%v)", err)
	}
	if _, err := m.store.Manifest(p2.Node("argv").Key()); err != nil {
		t.Error(err)
	}
	left, _ := os.ReadDir(filepath.Join(m.store.Root, "staging"))
	if len(left) != 0 {
		t.Errorf("staging/ keeps %d entries after the forced rebuild", len(left))
	}
}

// A library and a program linking it from the build dir, no rpath given:
// the situation of zstd's CMake build (defect 4).
var linkProject = map[string]string{
	"recipes/hello.yaml": `name: hello
versions:
  - version: "1.0"
    source: {local: ../hellosrc}
build:
  make: {}
`,
	"hellosrc/Makefile": `all:
	$(CC) $(CFLAGS) -fPIC -shared -Wl,-soname,libhello.so.1 -o libhello.so.1 hello.c
	ln -sf libhello.so.1 libhello.so
	$(CC) $(CFLAGS) -o hello main.c -L. -lhello
install:
	mkdir -p $(DESTDIR)$(prefix)/lib $(DESTDIR)$(prefix)/bin $(DESTDIR)$(prefix)/lib/pkgconfig
	cp libhello.so.1 $(DESTDIR)$(prefix)/lib/
	ln -sf libhello.so.1 $(DESTDIR)$(prefix)/lib/libhello.so
	cp hello $(DESTDIR)$(prefix)/bin/
	printf 'prefix=$(prefix)\nlibdir=$${prefix}/lib\nName: hello\nVersion: 1.0\nDescription: h\nLibs: -L$${libdir} -lhello\n' > $(DESTDIR)$(prefix)/lib/pkgconfig/hello.pc
`,
	"hellosrc/hello.c": "const char *hello_marker(void) { return \"own libhello\"; }\n",
	"hellosrc/main.c":  "#include <stdio.h>\nconst char *hello_marker(void);\nint main(void) { puts(hello_marker()); return 0; }\n",
}

// Defect 4: every installed ELF file finds the tree's own libraries
// through an $ORIGIN-relative runpath, from the store and from a prefix.
func TestInstalledProgramsFindOwnLibraries(t *testing.T) {
	testenv.NeedTools(t, "patchelf")
	m := newMiniProject(t, linkProject)
	m.targets = []string{"hello"}
	p := m.mustBuild(m.store)
	tree := m.store.TreeDir(p.Node("hello").Key())
	f, err := elf.Open(filepath.Join(tree, "bin", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	rp, _ := f.DynString(elf.DT_RUNPATH)
	f.Close()
	if len(rp) != 1 || rp[0] != "$ORIGIN/../lib" {
		t.Errorf("bin/hello runpath %q, want $ORIGIN/../lib", rp)
	}
	for _, bin := range []string{filepath.Join(tree, "bin", "hello")} {
		cmd := exec.Command(bin)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "own libhello\n" {
			t.Errorf("%s: %q %v", bin, out, err)
		}
	}
}

// Defect 1: install owns only what it installed. A foreign non-empty
// prefix is refused (naming what is there) unless forced, the user's files
// survive every install, and stale files of our own are removed.
func TestInstallKeepsForeignFiles(t *testing.T) {
	testenv.NeedTools(t, "patchelf")
	files := map[string]string{}
	for k, v := range linkProject {
		files[k] = v
	}
	for k, v := range argvProject {
		files[k] = v
	}
	m := newMiniProject(t, files)
	m.targets = []string{"hello", "argv"}
	p := m.mustBuild(m.store)
	prefix := filepath.Join(t.TempDir(), "prefix")
	mine := filepath.Join(prefix, "share", "mine.txt")
	os.MkdirAll(filepath.Dir(mine), 0o755)
	os.WriteFile(mine, []byte("user data\n"), 0o644)
	ctx := context.Background()

	_, err := Install(ctx, m.store, p.Nodes, prefix, InstallOptions{})
	if err == nil || !strings.Contains(err.Error(), "share/mine.txt") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("install into a foreign prefix: %v, want a refusal naming share/mine.txt", err)
	}
	res, err := Install(ctx, m.store, p.Nodes, prefix, InstallOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	// hello: 2 libs entries + bin + .pc; argv: three files.
	if res.Trees != 2 || res.Files != 7 {
		t.Errorf("install result %+v, want 2 trees and 7 files (directories not counted)", res)
	}
	if b, _ := os.ReadFile(mine); string(b) != "user data\n" {
		t.Fatalf("the user's file is gone or changed: %q", b)
	}
	// The installed program runs from the prefix, and the pkg-config file
	// names the prefix, not the store.
	if out, err := exec.Command(filepath.Join(prefix, "bin", "hello")).CombinedOutput(); err != nil || string(out) != "own libhello\n" {
		t.Errorf("installed hello: %q %v", out, err)
	}
	pc, _ := os.ReadFile(filepath.Join(prefix, "lib", "pkgconfig", "hello.pc"))
	if !strings.Contains(string(pc), "prefix="+prefix+"\n") || strings.Contains(string(pc), m.store.Root) {
		t.Errorf("installed hello.pc names the store, not the prefix:\n%s", pc)
	}

	// Installing only argv now: hello's files are stale and ours, so they go;
	// a file of ours the user edited stays; the user's file stays.
	onlyArgv := []*Node{p.Node("argv")}
	if err := os.WriteFile(filepath.Join(prefix, "lib", "pkgconfig", "hello.pc"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = Install(ctx, m.store, onlyArgv, prefix, InstallOptions{})
	if err != nil {
		t.Fatalf("reinstall into our own prefix: %v", err)
	}
	for _, gone := range []string{"bin/hello", "lib/libhello.so.1", "lib/libhello.so", "bin"} {
		if _, err := os.Lstat(filepath.Join(prefix, gone)); !os.IsNotExist(err) {
			t.Errorf("stale %s still there (%v)", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(prefix, "lib", "pkgconfig", "hello.pc")); err != nil || len(res.Kept) != 1 {
		t.Errorf("an edited file of ours was removed or not reported kept: %v %v", err, res.Kept)
	}
	if b, _ := os.ReadFile(mine); string(b) != "user data\n" {
		t.Fatalf("the user's file is gone after the second install")
	}
	if _, err := os.Stat(filepath.Join(prefix, "share", "args.txt")); err != nil {
		t.Error(err)
	}
}

// Defect 10: make and script steps, which print no [N/M] counts, still
// report that they run: their output lines.
func TestScriptStepsReportProgress(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/talk.yaml": "name: talk\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: talk\n        run: for i in 1 2 3; do echo line $i; done\n",
		"src/x":             "x\n",
	})
	m.targets = []string{"talk"}
	p := m.plan(m.store)
	ch := make(chan StepUpdate)
	var got []StepUpdate
	done := make(chan struct{})
	go func() {
		for u := range ch {
			got = append(got, u)
		}
		close(done)
	}()
	ex := &Executor{Store: m.store, Jobs: 1, Progress: ch}
	err := ex.Run(context.Background(), p, p.Nodes)
	close(ch)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, u := range got {
		if u.Label == "talk talk" && u.Lines > 0 {
			lines = u.Lines
		}
	}
	if lines == 0 {
		t.Errorf("no line counts among the updates: %+v", got)
	}
}

// Defect 10: a build waiting on another process's store lock says so.
func TestLockWaitIsReported(t *testing.T) {
	m := newMiniProject(t, argvProject)
	m.targets = []string{"argv"}
	p := m.plan(m.store)
	unlock, err := m.store.Lock(context.Background(), p.Node("argv").Key())
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ex := &Executor{Store: m.store, Out: w, Jobs: 1}
		done <- ex.Run(context.Background(), p, p.Nodes)
		w.Close()
	}()
	sc := bufio.NewScanner(r)
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	for sc.Scan() && !strings.Contains(sc.Text(), "waiting for another tritonbuild process") {
	}
	if sc.Err() != nil {
		t.Fatalf("no waiting message: %v", sc.Err())
	}
	unlock()
	go io.Copy(io.Discard, r)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Defect 10: a failed attempt leaves no staging dir behind.
func TestFailedBuildLeavesNoStaging(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/fail.yaml": "name: fail\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: half\n        run: mkdir -p \"$DESTDIR${prefix}/share\" && touch \"$DESTDIR${prefix}/share/half\" && exit 3\n",
		"src/x":             "x\n",
	})
	m.targets = []string{"fail"}
	if _, _, err := m.build(m.store); err == nil {
		t.Fatal("the failing step succeeded")
	}
	if left, _ := os.ReadDir(filepath.Join(m.store.Root, "staging")); len(left) != 0 {
		t.Errorf("staging/ keeps %d entries after a failed build", len(left))
	}
}

// `tritonbuild gc`: a dry run by default; failed attempts, staging dirs,
// unreachable trees and caches beyond the size kept, but nothing in use.
func TestGC(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/keep.yaml": "name: keep\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: i\n        run: mkdir -p \"$DESTDIR${prefix}\" && cp x \"$DESTDIR${prefix}/\"\n",
		"recipes/drop.yaml": "name: drop\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: i\n        run: mkdir -p \"$DESTDIR${prefix}\" && cp x \"$DESTDIR${prefix}/y\"\n",
		"recipes/fail.yaml": "name: fail\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: i\n        run: exit 1\n",
		"recipes/busy.yaml": "name: busy\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: i\n        run: exit 1\n",
		"src/x":             "x\n",
	})
	m.targets = []string{"keep", "drop"}
	p := m.mustBuild(m.store)
	m.targets = []string{"fail"}
	if _, _, err := m.build(m.store); err == nil {
		t.Fatal("fail built")
	}
	m.targets = []string{"busy"}
	pb, _, _ := m.build(m.store)
	unlock, err := m.store.Lock(context.Background(), pb.Node("busy").Key())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	layers := filepath.Join(m.store.Root, "images", "layers")
	os.MkdirAll(layers, 0o755)
	for i, name := range []string{"old", "mid", "new"} {
		f := filepath.Join(layers, name)
		os.WriteFile(f, make([]byte, 1<<20), 0o644)
		ts := time.Unix(int64(1000+i), 0)
		os.Chtimes(f, ts, ts)
	}
	reach := map[string]bool{filepath.Base(m.store.NodeDir(p.Node("keep").Key())): true}
	opts := GCOptions{Reachable: reach, KeepCache: 3 << 19}
	items, err := GC(context.Background(), m.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range items {
		rel, _ := filepath.Rel(m.store.Root, it.Path)
		got[rel] = it.Why
	}
	want := []string{
		"nodes/" + filepath.Base(m.store.NodeDir(p.Node("drop").Key())),
		"work/" + filepath.Base(m.store.WorkDir(m.planOf("fail").Node("fail").Key())),
		"images/layers/old", "images/layers/mid",
	}
	if len(got) != len(want) {
		t.Errorf("gc found %v, want %v", got, want)
	}
	for _, w := range want {
		if _, ok := got[w]; !ok {
			t.Errorf("gc does not list %s (it lists %v)", w, got)
		}
	}
	for _, p := range want {
		if _, err := os.Stat(filepath.Join(m.store.Root, p)); err != nil {
			t.Errorf("a dry run removed %s", p)
		}
	}
	opts.Delete = true
	if _, err := GC(context.Background(), m.store, opts); err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if _, err := os.Stat(filepath.Join(m.store.Root, p)); !os.IsNotExist(err) {
			t.Errorf("gc --delete kept %s", p)
		}
	}
	if !m.store.Has(p.Node("keep").Key()) {
		t.Error("gc removed a reachable tree")
	}
	if _, err := os.Stat(m.store.WorkDir(pb.Node("busy").Key())); err != nil {
		t.Error("gc removed the work dir of a node whose lock is held")
	}
}

func (m *miniProject) planOf(target string) *Plan {
	saved := m.targets
	m.targets = []string{target}
	defer func() { m.targets = saved }()
	return m.plan(m.store)
}

// Defect 7 and the "done when": verify rebuilds under another
// store root and finds no difference for a reproducible package whose
// files name its prefix (a .pc file, a runpath to its own library).
func TestVerifyUnderAnotherRootFindsNoDifference(t *testing.T) {
	testenv.NeedTools(t, "patchelf")
	m := newMiniProject(t, linkProject)
	m.targets = []string{"hello"}
	set, err := recipe.Load(recipe.OSDir(filepath.Join(m.dir, "recipes")))
	if err != nil {
		t.Fatal(err)
	}
	proj := &Project{Recipes: set, Settings: recipe.Settings{Targets: m.targets}, Store: m.store, Dir: m.dir}
	p, err := proj.Plan(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Executor{Store: m.store, Jobs: 2}).Run(context.Background(), p, p.Nodes); err != nil {
		t.Fatal(err)
	}
	man, err := m.store.Manifest(p.Node("hello").Key())
	if err != nil {
		t.Fatal(err)
	}
	prefixFiles := 0
	for _, f := range man.Files {
		if f.Prefix {
			prefixFiles++
		}
	}
	if prefixFiles != 1 {
		t.Errorf("%d files marked as naming the store, want 1 (hello.pc)", prefixFiles)
	}
	var out bytes.Buffer
	diffs, err := Verify(context.Background(), proj, "hello", filepath.Join(t.TempDir(), "another-root"), &Executor{Out: &out, Jobs: 2})
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if len(diffs) != 0 {
		t.Errorf("verify under another root reports differences:\n%s", strings.Join(diffs, "\n"))
	}
}

// Binaries that embed the store path other than in a runpath are detected
// and reported: they are not relocatable.
func TestBinaryEmbeddingTheStoreIsReported(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/emb.yaml": "name: emb\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: i\n        run: mkdir -p \"$DESTDIR${prefix}/share\" && printf 'data\\0%s\\0' \"${prefix}/share\" > \"$DESTDIR${prefix}/share/blob\"\n",
		"src/x":            "x\n",
	})
	m.targets = []string{"emb"}
	p, out, err := m.build(m.store)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "warning: 1 binary file(s) embed the store path and are not relocatable: share/blob") {
		t.Errorf("build output does not report the binary:\n%s", out)
	}
	man, _ := m.store.Manifest(p.Node("emb").Key())
	for _, f := range man.Files {
		if f.Path == "share/blob" && (!f.EmbedsStore || f.Prefix) {
			t.Errorf("share/blob: %+v", f)
		}
	}
}

// A runpath to elsewhere only (CMake's link path to an external) still
// gets the entry for the tree's own library; an $ORIGIN entry the recipe
// chose is kept as it is.
func TestRunpathToElsewhereGetsOwnLibrary(t *testing.T) {
	testenv.NeedTools(t, "patchelf")
	files := map[string]string{}
	for k, v := range linkProject {
		files[k] = v
	}
	files["hellosrc/Makefile"] = strings.Replace(linkProject["hellosrc/Makefile"], "-o hello main.c -L. -lhello", "-o hello main.c -L. -lhello -Wl,-rpath,/opt/nowhere/lib\n\t$(CC) $(CFLAGS) -o hello2 main.c -L. -lhello '-Wl,-rpath,$$ORIGIN/../lib'", 1)
	files["hellosrc/Makefile"] = strings.Replace(files["hellosrc/Makefile"], "cp hello $(DESTDIR)", "cp hello2 $(DESTDIR)$(prefix)/bin/\n\tcp hello $(DESTDIR)", 1)
	m := newMiniProject(t, files)
	m.targets = []string{"hello"}
	p := m.mustBuild(m.store)
	tree := m.store.TreeDir(p.Node("hello").Key())
	for bin, want := range map[string]string{"hello": "/opt/nowhere/lib:$ORIGIN/../lib", "hello2": "$ORIGIN/../lib"} {
		f, err := elf.Open(filepath.Join(tree, "bin", bin))
		if err != nil {
			t.Fatal(err)
		}
		rp, _ := f.DynString(elf.DT_RUNPATH)
		f.Close()
		if strings.Join(rp, ":") != want {
			t.Errorf("bin/%s runpath %q, want %q", bin, rp, want)
		}
		if out, err := exec.Command(filepath.Join(tree, "bin", bin)).CombinedOutput(); err != nil || string(out) != "own libhello\n" {
			t.Errorf("bin/%s: %q %v", bin, out, err)
		}
	}
}

// --force after a build kept with --keep-work starts over: the kept work
// dir (its sources and build dir, their step markers) is not resumed.
func TestForceRebuildStartsFromAFreshWorkDir(t *testing.T) {
	m := newMiniProject(t, argvProject)
	m.targets = []string{"argv"}
	build := func(force ...string) *Plan {
		t.Helper()
		p := m.plan(m.store, force...)
		var out bytes.Buffer
		if err := (&Executor{Store: m.store, Out: &out, Jobs: 2, KeepWork: true}).Run(context.Background(), p, p.Nodes); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return p
	}
	p := build()
	stale := filepath.Join(m.store.WorkDir(p.Node("argv").Key()), "build", "left-by-the-last-build")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	build("argv")
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the forced rebuild resumed the kept work dir (%v)", err)
	}
}
