package pyenv

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/testenv"
	"github.com/tritonbuild/tritonbuild/runtime/python"
)

// hostPython is the distribution interpreter with numpy (and pip, venv).
const hostPython = "/usr/bin/python3"

func needPython(t *testing.T) {
	t.Helper()
	testenv.NeedPython(t, hostPython, "numpy", "pip", "venv")
}

// The packer's default is the interpreter the server runs models with.
func TestDefaultServerPythonIsTheBackendDefault(t *testing.T) {
	if DefaultServerPython != python.DefaultInterpreter {
		t.Errorf("DefaultServerPython %q, the python backend's default interpreter %q", DefaultServerPython, python.DefaultInterpreter)
	}
}

// writeWheel writes a one-module wheel tinypkg-1.0 into dir.
func writeWheel(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "tinypkg-1.0-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	files := []struct{ name, body string }{
		{"tinypkg.py", "VALUE = 42\n"},
		{"tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"},
		{"tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"tinypkg-1.0.dist-info/RECORD", ""},
	}
	for _, e := range files {
		w, err := z.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store, Modified: time.Unix(315532800, 0)})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, e.body)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func sha(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// readArchive returns the headers and contents of a .tar.gz.
func readArchive(t *testing.T, path string) ([]*tar.Header, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var hdrs []*tar.Header
	bodies := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		b, _ := io.ReadAll(tr)
		bodies[h.Name] = string(b)
	}
	return hdrs, bodies
}

// Two packs of the same requirements, in different scratch directories,
// give the same bytes; the archive is sorted, with one mtime, owners 0:0
// without names, no bytecode, nothing naming the build directory, and a
// manifest naming the installed package.
func TestPackFromRequirementsIsDeterministic(t *testing.T) {
	needPython(t)
	wheels := t.TempDir()
	writeWheel(t, wheels)
	req := filepath.Join(t.TempDir(), "requirements.txt")
	os.WriteFile(req, []byte("tinypkg==1.0\n"), 0o644)
	out := t.TempDir()
	var shas []string
	var results []*Result
	for _, name := range []string{"a.tar.gz", "b.tar.gz"} {
		res, err := Pack(context.Background(), Options{Requirements: req, FindLinks: []string{wheels}, SystemSitePackages: true,
			Imports: []string{"tinypkg"}, Output: filepath.Join(out, name)})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
		shas = append(shas, sha(t, res.Output))
		if res.SHA256 != shas[len(shas)-1] {
			t.Errorf("reported sha256 %s, file has %s", res.SHA256, shas[len(shas)-1])
		}
	}
	if shas[0] != shas[1] {
		t.Fatalf("two packs differ: %s %s", shas[0], shas[1])
	}
	res := results[0]
	if st, _ := os.Stat(res.Output); st == nil || st.Size() != res.Size {
		t.Errorf("reported size %d, file %v", res.Size, st)
	}
	hdrs, bodies := readArchive(t, res.Output)
	if len(hdrs) != res.Files {
		t.Errorf("%d entries, reported %d", len(hdrs), res.Files)
	}
	var unpacked int64
	for i, h := range hdrs {
		if i > 0 && hdrs[i-1].Name >= h.Name {
			t.Errorf("entries not sorted: %s before %s", hdrs[i-1].Name, h.Name)
		}
		if !strings.HasPrefix(h.Name, TopDir+"/") {
			t.Errorf("entry %s outside %s/", h.Name, TopDir)
		}
		if !h.ModTime.Equal(Epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v owner %d:%d %q:%q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if strings.Contains(h.Name, "__pycache__") || strings.HasSuffix(h.Name, ".pyc") {
			t.Errorf("bytecode in the archive: %s", h.Name)
		}
		if h.Typeflag == tar.TypeSymlink && filepath.IsAbs(h.Linkname) && h.Name != "venv/bin/python3" {
			t.Errorf("absolute link %s -> %s", h.Name, h.Linkname)
		}
		unpacked += h.Size
	}
	if unpacked != res.Unpacked {
		t.Errorf("unpacked %d, reported %d", unpacked, res.Unpacked)
	}
	for name, body := range bodies {
		if strings.Contains(body, os.TempDir()+"/tritonbuild-pyenv-") {
			t.Errorf("%s names the build directory:\n%s", name, body)
		}
	}
	found := false
	for name, body := range bodies {
		found = found || strings.HasSuffix(name, "/site-packages/tinypkg.py") && body == "VALUE = 42\n"
	}
	if !found {
		t.Errorf("tinypkg.py not in the archive")
	}
	var m Manifest
	if err := json.Unmarshal([]byte(bodies["venv/"+ManifestName]), &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, bodies["venv/"+ManifestName])
	}
	if len(m.Packages) != 1 || m.Packages[0] != (Package{"tinypkg", "1.0"}) || !m.SystemSitePackages || m.BaseInterpreter == "" {
		t.Errorf("manifest %+v", m)
	}
	found = false
	for _, p := range m.SystemPackages {
		found = found || p.Name == "numpy"
	}
	if !found || res.NumPy == "" {
		t.Errorf("numpy (%q) not among the system packages %v", res.NumPy, m.SystemPackages)
	}
	if left, _ := os.ReadDir(out); len(left) != 2 {
		t.Errorf("output directory holds %v", left)
	}
}

// An existing venv with pip (console scripts whose shebangs name its
// directory) and bytecode packs without either; extracted elsewhere, its
// bin/activate and bin/pip work from there, and the venv itself is left
// as it was.
func TestPackExistingVenvIsRelocatable(t *testing.T) {
	needPython(t)
	testenv.NeedTools(t, "bash", "sh", "dirname")
	venv := filepath.Join(t.TempDir(), "myenv")
	if out, err := exec.Command(hostPython, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(venv, "bin", "python3"), "-m", "compileall", "-q", filepath.Join(venv, "lib")).CombinedOutput(); err != nil {
		t.Fatalf("compileall: %v\n%s", err, out)
	}
	before, _ := os.ReadFile(filepath.Join(venv, "bin", "pip"))
	if !strings.HasPrefix(string(before), "#!"+venv) {
		t.Fatalf("bin/pip starts %q", before[:min(len(before), 80)])
	}
	out := filepath.Join(t.TempDir(), "env.tgz")
	res, err := Pack(context.Background(), Options{Venv: venv, Output: out, Imports: []string{"pip"}})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(venv, "bin", "pip")); !bytes.Equal(before, after) {
		t.Error("packing changed the venv")
	}
	hdrs, bodies := readArchive(t, out)
	for _, h := range hdrs {
		if strings.HasSuffix(h.Name, ".pyc") || strings.Contains(h.Name, "__pycache__") || strings.HasSuffix(h.Name, "activate.fish") {
			t.Errorf("archive holds %s", h.Name)
		}
	}
	for name, body := range bodies {
		if strings.Contains(body, venv) {
			t.Errorf("%s names the venv's directory", name)
		}
	}
	if !strings.Contains(bodies["venv/pyvenv.cfg"], "home = ") || strings.Contains(bodies["venv/pyvenv.cfg"], "command") {
		t.Errorf("pyvenv.cfg:\n%s", bodies["venv/pyvenv.cfg"])
	}
	pkgs := map[string]bool{}
	for _, p := range res.Manifest.Packages {
		pkgs[p.Name] = true
	}
	if !pkgs["pip"] {
		t.Errorf("manifest packages %v lack pip", res.Manifest.Packages)
	}

	dest := filepath.Join(t.TempDir(), "elsewhere")
	os.MkdirAll(dest, 0o755)
	if out, err := exec.Command("tar", "xzf", out, "-C", dest).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	root := filepath.Join(dest, TopDir)
	got, err := exec.Command("bash", "-c", `source "$1/bin/activate" && echo "$VIRTUAL_ENV" && command -v python3`, "bash", root).CombinedOutput()
	if want := root + "\n" + root + "/bin/python3\n"; err != nil || string(got) != want {
		t.Errorf("sourcing the extracted bin/activate: %v\n%s\nwant\n%s", err, got, want)
	}
	got, err = exec.Command(filepath.Join(root, "bin", "pip"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(got), filepath.Join(root, "lib")) {
		t.Errorf("the extracted bin/pip: %v\n%s", err, got)
	}
}

// A venv over another interpreter than the server's is refused, naming
// both; so are a missing import, an env over the size limit, a file that
// names the env's directory and a link out of the env. None leaves an
// output behind.
func TestPackRefusals(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	outDir := t.TempDir()
	out := filepath.Join(outDir, "venv.tar.gz")
	venv := filepath.Join(t.TempDir(), "venv")
	if b, err := exec.Command(hostPython, "-m", "venv", "--system-site-packages", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, b)
	}

	// Another interpreter: a copy of the distribution's binary elsewhere
	// runs (it finds its standard library by its compiled-in prefix) but is
	// not what the venv's bin/python3 runs.
	real, _ := filepath.EvalSymlinks(hostPython)
	other := filepath.Join(t.TempDir(), filepath.Base(real))
	data, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(other, data, 0o755)
	_, err = Pack(ctx, Options{Venv: venv, Output: out, ServerPython: other})
	var mm *MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), real) {
		t.Errorf("other server python: %v", err)
	}

	_, err = Pack(ctx, Options{Venv: venv, Output: out, Imports: []string{"no_such_module_here"}})
	if err == nil || !strings.Contains(err.Error(), "import no_such_module_here: ModuleNotFoundError") {
		t.Errorf("missing import: %v", err)
	}

	_, err = Pack(ctx, Options{Venv: venv, Output: out, MaxSize: 1024})
	var se *SizeError
	if !errors.As(err, &se) || se.Max != 1024 || se.Unpacked <= 1024 {
		t.Errorf("size limit: %v", err)
	}

	sites, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if len(sites) != 1 {
		t.Fatalf("site-packages: %v", sites)
	}
	pth := filepath.Join(sites[0], "local.pth")
	os.WriteFile(pth, []byte(venv+"/src\n"), 0o644)
	_, err = Pack(ctx, Options{Venv: venv, Output: out})
	var nr *NotRelocatableError
	if !errors.As(err, &nr) || len(nr.Files) != 1 || !strings.HasSuffix(nr.Files[0], "local.pth") {
		t.Errorf("file naming the venv: %v", err)
	}
	os.Remove(pth)

	os.Symlink("/etc/passwd", filepath.Join(venv, "lib", "passwd"))
	_, err = Pack(ctx, Options{Venv: venv, Output: out})
	if err == nil || !strings.Contains(err.Error(), "leaves the env") {
		t.Errorf("link out of the env: %v", err)
	}
	os.Remove(filepath.Join(venv, "lib", "passwd"))

	if _, err := Pack(ctx, Options{Venv: venv, Output: filepath.Join(outDir, "venv.zip")}); err == nil {
		t.Error("a .zip output was accepted")
	}
	if left, _ := os.ReadDir(outDir); len(left) != 0 {
		t.Errorf("refusals left %v", left)
	}
	// And the venv is fine once repaired.
	if _, err := Pack(ctx, Options{Venv: venv, Output: out}); err != nil {
		t.Errorf("the repaired venv: %v", err)
	}
}
