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

// addOverride records dir as an override directory of model name, to be
// removed once no version of the model serves from it (dropOverrides).
func (m *Manager) addOverride(name, dir string) {
	m.mu.Lock()
	m.overrides[name] = append(m.overrides[name], dir)
	m.mu.Unlock()
}

// dropOverrides removes the override directories of model name that no
// loaded version serves from any more: a version loaded from one reads
// its files while it serves (a python stub restarting imports model.py
// again), so a directory lives until its last version is replaced or
// unloaded, whether the load that wrote it loaded every version or only
// some. Callers hold the model's lock, after closing what they retired.
func (m *Manager) dropOverrides(name string) {
	m.mu.Lock()
	live := map[string]bool{}
	if e := m.models[name]; e != nil {
		for _, ve := range e.versions {
			if ve.model != nil {
				live[ve.model.Spec.ModelDir] = true
			}
		}
	}
	var keep, drop []string
	for _, dir := range m.overrides[name] {
		if live[dir] {
			keep = append(keep, dir)
		} else {
			drop = append(drop, dir)
		}
	}
	if len(keep) == 0 {
		delete(m.overrides, name)
	} else {
		m.overrides[name] = keep
	}
	m.mu.Unlock()
	for _, dir := range drop {
		if err := os.RemoveAll(dir); err != nil {
			m.log.Warn("removing a model's override directory", "model", name, "dir", dir, "err", err)
		}
	}
}
