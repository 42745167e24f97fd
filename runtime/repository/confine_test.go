package repository

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/fake"
)

// TestFilesConfinedToModelDirectory is issue 17's case 8 and the file part
// of case 10: a config override naming "../../../elsewhere/other.pt"
// loaded a foreign model, op_library_filename loaded any .so, and files
// reached through symlinks leaked their contents into errors. Every file a
// config names must resolve inside the model directory; refusals name the
// file as the config gave it, and no server path or file content.
func TestFilesConfinedToModelDirectory(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "repo")
	elsewhere := filepath.Join(base, "elsewhere")
	writeFile(t, filepath.Join(elsewhere, "other.pt"), "foreign")
	writeFile(t, filepath.Join(elsewhere, "evil.so"), "foreign")
	writeFile(t, filepath.Join(elsewhere, "secret"), "root:x:0:0:secret\n")
	writeModel(t, root, "m", withFile, []string{"1"}, "model.bin")
	mgr := newManager(t, fake.New(), true, root)
	ctx := context.Background()
	if err := mgr.Load(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	over := func(extra string) string {
		out := `,"output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3]}]`
		if strings.Contains(extra, `"output"`) {
			out = ""
		}
		return `{"backend":"fake","max_batch_size":8,"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}]` + out + extra + `}`
	}
	if err := os.Symlink(filepath.Join(elsewhere, "other.pt"), filepath.Join(root, "m", "1", "link.pt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "secret"), filepath.Join(root, "m", "warmup-secret")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "m", "warmup", "x"), "")
	if err := os.Symlink(filepath.Join(elsewhere, "secret"), filepath.Join(root, "m", "warmup", "secret")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, extra, want string }{
		{"model file up and out", `,"default_model_filename":"../../../elsewhere/other.pt"`, "model file '../../../elsewhere/other.pt' resolves outside the model directory"},
		{"absolute model file", `,"default_model_filename":"` + filepath.Join(elsewhere, "other.pt") + `"`, "resolves outside the model directory"},
		{"model file through a symlink", `,"default_model_filename":"link.pt"`, "model file 'link.pt' resolves outside the model directory"},
		{"op library", `,"default_model_filename":"model.bin","model_operations":{"op_library_filename":["` + filepath.Join(elsewhere, "evil.so") + `"]}`, "op_library_filename"},
		{"warmup through a symlink", `,"default_model_filename":"model.bin","model_warmup":[{"name":"w","batch_size":1,"inputs":{"INPUT__0":{"data_type":"TYPE_FP32","dims":[4],"input_data_file":"secret"}}}]`, "input_data_file 'secret' resolves outside the model directory"},
		{"labels", `,"default_model_filename":"model.bin","output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3],"label_filename":"../../elsewhere/secret"}]`, "label_filename '../../elsewhere/secret' resolves outside"},
	} {
		err := mgr.LoadModel(ctx, "m", []byte(over(c.extra)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "root:x") || strings.Contains(err.Error(), root) {
			t.Errorf("%s: the error shows a server path or file content: %v", c.name, err)
		}
	}
	if mod, err := mgr.Get("m", -1); err != nil || mod.Spec.Filename != "model.bin" {
		t.Errorf("after the refused overrides: %v %v", mod, err)
	}
	// A config.pbtxt that is a symlink out of the directory is not read.
	writeModel(t, root, "leak", "", []string{"1"}, "model.bin")
	if err := os.Symlink(filepath.Join(elsewhere, "secret"), filepath.Join(root, "leak", ConfigFile)); err != nil {
		t.Fatal(err)
	}
	err := mgr.Load(ctx, "leak")
	if err == nil || !strings.Contains(err.Error(), "config.pbtxt 'config.pbtxt' resolves outside the model directory") || strings.Contains(err.Error(), "root") {
		t.Errorf("config.pbtxt symlinked out: %v", err)
	}
}

// TestOpLibrariesFromLibraryDirs: an op library may also come from
// Options.LibraryDirs (the server's install lib/, where custom operators
// are installed), and from nowhere else.
func TestOpLibrariesFromLibraryDirs(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "repo")
	lib := filepath.Join(base, "prefix", "lib")
	writeFile(t, filepath.Join(lib, "libmyops.so"), "op")
	writeFile(t, filepath.Join(base, "elsewhere", "evil.so"), "foreign")
	writeModel(t, root, "m", withFile, []string{"1"}, "model.bin")
	mgr, err := New(Options{
		Repositories: []string{root},
		Backends:     map[string]backend.Backend{"fake": fake.New()},
		LibraryDirs:  []string{lib},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	ctx := context.Background()
	over := func(lib string) []byte {
		return []byte(`{"backend":"fake","max_batch_size":8,"default_model_filename":"model.bin",` +
			`"input":[{"name":"INPUT__0","data_type":"TYPE_FP32","dims":[4]}],` +
			`"output":[{"name":"OUTPUT__0","data_type":"TYPE_FP32","dims":[3]}],` +
			`"model_operations":{"op_library_filename":["` + lib + `"]}}`)
	}
	if err := mgr.LoadModel(ctx, "m", over("../../../prefix/lib/libmyops.so")); err != nil {
		t.Fatalf("op library in the library dir: %v", err)
	}
	mod, err := mgr.Get("m", -1)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(filepath.Join(lib, "libmyops.so"))
	if len(mod.Spec.OpLibraries) != 1 || mod.Spec.OpLibraries[0] != real {
		t.Errorf("op libraries %v, want [%s]", mod.Spec.OpLibraries, real)
	}
	for _, c := range []struct{ lib, want string }{
		{filepath.Join(base, "elsewhere", "evil.so"), "resolves outside the model directory and the server's library directory"},
		{"../../../prefix/lib/libnone.so", "not found"},
	} {
		err := mgr.LoadModel(ctx, "m", over(c.lib))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.lib, err, c.want)
		}
	}
}
