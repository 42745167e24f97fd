package repository

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/runtime/modelconfig"
)

// TestLabelFileConfinement: label_filename is read inside the model
// directory only; a path or a symlink leading out is refused.
func TestLabelFileConfinement(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(root, "secret.txt")
	os.WriteFile(secret, []byte("root:x:0:0\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "labels.txt"), []byte("a\r\nb\n"), 0o644)
	if err := os.Symlink(secret, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	out := func(name string) []*modelconfig.ModelOutput {
		return []*modelconfig.ModelOutput{{Name: "O", LabelFilename: name}}
	}
	labels, err := loadLabels(dir, out("labels.txt"))
	if err != nil || strings.Join(labels["O"], ",") != "a,b" {
		t.Errorf("labels.txt: %v %v", labels, err)
	}
	for _, name := range []string{"../secret.txt", "link.txt", secret, "missing.txt"} {
		if _, err := loadLabels(dir, out(name)); err == nil || strings.Contains(err.Error(), "root:x") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
