package python

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// stubFS holds the stub program and the triton_python_backend_utils module
// that models import. They are written to a directory named after their
// content digest, so a server upgrade never runs a stale copy and two
// servers sharing a cache never overwrite each other's files.
//
//go:embed stub/*.py
var stubFS embed.FS

const stubScript = "tritonbuild_stub.py"

// writeStubFiles makes sure <root>/<digest>/ holds the embedded files and
// returns the path of the stub script in it.
func writeStubFiles(root string) (string, error) {
	names, err := fs.Glob(stubFS, "stub/*.py")
	if err != nil {
		return "", fmt.Errorf("listing embedded stub files: %w", err)
	}
	sort.Strings(names)
	h := sha256.New()
	contents := make(map[string][]byte, len(names))
	for _, name := range names {
		data, err := stubFS.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("reading embedded %s: %w", name, err)
		}
		contents[filepath.Base(name)] = data
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(name), len(data))
		h.Write(data)
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	script := filepath.Join(dir, stubScript)
	if _, err := os.Stat(script); err == nil {
		return script, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("creating python stub directory: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-stub-")
	if err != nil {
		return "", fmt.Errorf("creating python stub directory: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	for name, data := range contents {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return "", fmt.Errorf("writing python stub file: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("writing python stub files: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another server (or instance) won the race: its files are identical.
		if _, statErr := os.Stat(script); statErr == nil {
			return script, nil
		}
		return "", fmt.Errorf("installing python stub files in %s: %w", dir, err)
	}
	return script, nil
}
