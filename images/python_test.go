package images

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fakePython lays out an interpreter, its standard library and a
// site-packages directory shaped like Debian's, with files the excludes
// must drop.
func fakePython(t *testing.T) (root, interp, site string) {
	root = t.TempDir()
	writeFiles(t, root, map[string]string{
		"usr/bin/python3.11":                                "binary",
		"usr/lib/python3.11/os.py":                          "",
		"usr/lib/python3.11/json/__init__.py":               "",
		"usr/lib/python3.11/json/__pycache__/x.pyc":         "",
		"usr/lib/python3.11/__pycache__/os.cpython-311.pyc": "",
		"usr/lib/python3.11/test/test_os.py":                "",
		"usr/lib/python3.11/config-3.11-x86_64/libpython.a": "",
		"usr/lib/python3.11/lib-dynload/_json.so":           "",
		"site/numpy/__init__.py":                            "",
		"site/numpy/core/multiarray.py":                     "",
		"site/numpy/core/tests/test_multiarray.py":          "",
		"site/numpy/tests/test_numpy.py":                    "",
		"site/six.py":                                       "",
		"site/__pycache__/six.cpython-311.pyc":              "",
		"site/__pycache__/other.cpython-311.pyc":            "",
		"site/torch/__init__.py":                            "",
		"site/torch/bin/torch_shm_manager":                  "",
		"site/torch/bin/test_api":                           "",
		"site/torch/bin/TCPStoreTest":                       "",
		"site/torch/lib/libcaffe2_detectron_ops.so":         "",
		"site/torch/testing/__init__.py":                    "",
		"site/torch/testing/_internal/common_utils.py":      "",
		"site/unrelated/__init__.py":                        "",
	})
	interp = filepath.Join(root, "usr/bin/python3")
	if err := os.Symlink("python3.11", interp); err != nil {
		t.Fatal(err)
	}
	// Debian's torch/lib holds links into the library directory.
	if err := os.Symlink("../../usr/lib/python3.11/os.py", filepath.Join(root, "site/torch/lib/libtorch.so")); err != nil {
		t.Fatal(err)
	}
	return root, interp, filepath.Join(root, "site")
}

func TestPythonHostPathsSelectsAndExcludes(t *testing.T) {
	root, interp, site := fakePython(t)
	paths, err := PythonHostPaths(PythonOptions{Interpreter: interp, SitePackages: site, Packages: []string{"numpy", "six.py", "torch"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range paths {
		if rel, ok := strings.CutPrefix(p, root+"/"); ok {
			got[rel] = true
		}
	}
	if paths[0] != interp {
		t.Errorf("first path %s, want the interpreter %s", paths[0], interp)
	}
	for _, want := range []string{
		"usr/bin/python3", "usr/bin/python3.11",
		"usr/lib/python3.11/os.py", "usr/lib/python3.11/json", "usr/lib/python3.11/__pycache__", "usr/lib/python3.11/lib-dynload/_json.so",
		"site/numpy/__init__.py", "site/numpy/core/multiarray.py",
		"site/six.py", "site/__pycache__/six.cpython-311.pyc",
		"site/torch/__init__.py", "site/torch/bin/torch_shm_manager", "site/torch/lib/libtorch.so", "site/torch/testing/__init__.py",
	} {
		if !got[want] {
			t.Errorf("%s missing from %v", want, keys(got))
		}
	}
	for _, bad := range []string{
		"usr/lib/python3.11/test", "usr/lib/python3.11/config-3.11-x86_64",
		"usr/lib/python3.11/lib-dynload/readline.cpython-311-x86_64-linux-gnu.so",
		"site/numpy/core/tests", "site/numpy/tests", "site/__pycache__/other.cpython-311.pyc",
		"site/torch/bin/test_api", "site/torch/bin/TCPStoreTest", "site/torch/lib/libcaffe2_detectron_ops.so",
		"site/torch/testing/_internal", "site/unrelated",
	} {
		for p := range got {
			if p == bad || strings.HasPrefix(p, bad+"/") {
				t.Errorf("%s is listed (excluded or not asked for)", p)
			}
		}
	}
	// Directories with excluded entries are listed entry by entry.
	for _, split := range []string{"site", "site/numpy", "site/torch", "usr/lib/python3.11"} {
		if got[split] {
			t.Errorf("%s is listed whole despite excludes below it", split)
		}
	}
	if !sort.StringsAreSorted(paths[1:]) {
		t.Errorf("paths not sorted: %v", paths)
	}
}

func TestPythonHostPathsErrors(t *testing.T) {
	_, interp, site := fakePython(t)
	_, err := PythonHostPaths(PythonOptions{Interpreter: interp, SitePackages: site, Packages: []string{"numpy", "scipy"}})
	var pe *PythonError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), `package "scipy" is not installed`) {
		t.Errorf("missing package: %v", err)
	}
	other := filepath.Join(t.TempDir(), "notpython")
	os.WriteFile(other, []byte("x"), 0o755)
	if _, err := PythonHostPaths(PythonOptions{Interpreter: other, SitePackages: site}); !errors.As(err, &pe) || !strings.Contains(err.Error(), "not a pythonX.Y binary") {
		t.Errorf("not an interpreter: %v", err)
	}
	if _, err := PythonHostPaths(PythonOptions{Interpreter: filepath.Join(t.TempDir(), "python3")}); !errors.As(err, &pe) {
		t.Errorf("missing interpreter: %v", err)
	}
	if _, err := PythonHostPaths(PythonOptions{Interpreter: interp, SitePackages: site, Excludes: []string{"["}}); !errors.As(err, &pe) || !strings.Contains(err.Error(), "bad exclude pattern") {
		t.Errorf("bad pattern: %v", err)
	}
}

// A symlink inside a copied host directory that leads to a file outside
// it brings that file along (torch/lib/*.so -> the library directory), so
// the link does not dangle in the image.
func TestHostPathSymlinkTargetsCome(t *testing.T) {
	host := t.TempDir()
	writeFiles(t, host, map[string]string{"libdir/libreal.so.1": "real library bytes", "pkg/mod.py": ""})
	if err := os.Symlink("../libdir/libreal.so.1", filepath.Join(host, "pkg", "libreal.so")); err != nil {
		t.Fatal(err)
	}
	asm := assemble(t, Options{Trees: scriptTrees(t, "server"), Epoch: testEpoch, HostPaths: []string{filepath.Join(host, "pkg")}})
	layers, _ := asm.Image.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got[strings.TrimSuffix(h.Name, "/")] = h
	}
	base := strings.TrimPrefix(host, "/")
	if h := got[base+"/pkg/libreal.so"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../libdir/libreal.so.1" {
		t.Errorf("link: %+v", h)
	}
	if h := got[base+"/libdir/libreal.so.1"]; h == nil || h.Typeflag != tar.TypeReg || h.Size != int64(len("real library bytes")) {
		t.Errorf("link target: %+v", h)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
