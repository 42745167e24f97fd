package repository

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// DefaultMaxOverrideFilesSize is the default of
// Options.MaxOverrideFilesSize: 1 GiB of model files in one load.
const DefaultMaxOverrideFilesSize = 1 << 30

func (m *Manager) maxOverrideFiles() int64 {
	if m.opts.MaxOverrideFilesSize > 0 {
		return m.opts.MaxOverrideFilesSize
	}
	return DefaultMaxOverrideFilesSize
}

// writeOverride lays the files of a load request out as a model directory
// of its own (Triton's override directory): paths are relative to the
// model directory ("1/model.py"), inside it, and add up to at most
// Options.MaxOverrideFilesSize bytes. The directory is the caller's to
// remove.
func (m *Manager) writeOverride(name string, files map[string][]byte) (string, error) {
	var total int64
	for p, data := range files {
		total += int64(len(data))
		clean := filepath.Clean(filepath.FromSlash(p))
		if p == "" || filepath.IsAbs(clean) || clean == "." || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
			return "", backend.Errorf(backend.InvalidArg, "failed to load '%s': override file 'file:%s' must name a path inside the model directory", name, p)
		}
	}
	if limit := m.maxOverrideFiles(); total > limit {
		return "", backend.Errorf(backend.InvalidArg, "failed to load '%s': override files of %d bytes exceed the limit of %d bytes", name, total, limit)
	}
	root := m.opts.OverrideDir
	if root == "" {
		root = os.TempDir()
	}
	dir, err := os.MkdirTemp(root, "tritonbuild-override-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("failed to load '%s': creating its override directory: %w", name, err)
	}
	for p, data := range files {
		dst := filepath.Join(dir, filepath.Clean(filepath.FromSlash(p)))
		err := os.MkdirAll(filepath.Dir(dst), 0o755)
		if err == nil {
			err = atomicfile.WriteFile(dst, data, 0o644)
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("failed to load '%s': writing override file 'file:%s': %w", name, p, err)
		}
	}
	// As find does: the directory as the kernel sees it.
	if abs, err := filepath.EvalSymlinks(dir); err == nil {
		dir = abs
	}
	return dir, nil
}

// setOverride records the override directory model name now loads from
// ("" for its repository directory) and removes the one it replaces,
// whose models have closed by then.
func (m *Manager) setOverride(name, dir string) {
	m.mu.Lock()
	old := m.overrides[name]
	if dir == "" {
		delete(m.overrides, name)
	} else {
		m.overrides[name] = dir
	}
	m.mu.Unlock()
	if old != "" && old != dir {
		if err := os.RemoveAll(old); err != nil {
			m.log.Warn("removing a model's override directory", "model", name, "dir", old, "err", err)
		}
	}
}
