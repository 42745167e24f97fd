package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// Install lays the install trees of nodes (externals excluded) into one
// prefix, like the report's ~/triton_server_install. The new prefix is
// assembled next to the old one and swapped in by renames, so an
// interrupted install leaves the previous prefix intact. Two trees that
// ship the same path with different contents are an error.
func Install(ctx context.Context, st *store.Store, nodes []*Node, prefix string) error {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return err
	}
	tmp := abs + ".tritonbuild-new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	owner := map[string]string{}
	sums := map[string]string{}
	for _, n := range nodes {
		if n.Status == StatusExternal {
			continue
		}
		if err := ctx.Err(); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		m, err := st.Manifest(n.Key())
		if err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("install %s: %w (is it built?)", n.Name, err)
		}
		root := st.TreeDir(n.Key())
		for _, f := range m.Files {
			dst := filepath.Join(tmp, filepath.FromSlash(f.Path))
			src := filepath.Join(root, filepath.FromSlash(f.Path))
			if prev, ok := owner[f.Path]; ok {
				if f.Mode.IsDir() {
					continue
				}
				if sums[f.Path] != f.SHA256+f.Link {
					os.RemoveAll(tmp)
					return fmt.Errorf("install: %s is shipped by both %s and %s with different contents", f.Path, prev, n.Name)
				}
				continue
			}
			owner[f.Path] = n.Name
			sums[f.Path] = f.SHA256 + f.Link
			var err error
			switch {
			case f.Mode.IsDir():
				err = os.MkdirAll(dst, f.Mode.Perm()|0o700)
			case f.Mode&os.ModeSymlink != 0:
				err = os.Symlink(f.Link, dst)
			default:
				err = atomicfile.CopyFile(src, dst, f.Mode.Perm())
			}
			if err != nil {
				os.RemoveAll(tmp)
				return fmt.Errorf("install %s: %w", f.Path, err)
			}
		}
	}
	old := abs + ".tritonbuild-old"
	os.RemoveAll(old)
	if _, err := os.Lstat(abs); err == nil {
		if err := os.Rename(abs, old); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("install: moving the previous %s aside: %w", abs, err)
		}
	}
	if err := os.Rename(tmp, abs); err != nil {
		os.Rename(old, abs)
		return fmt.Errorf("install: %w", err)
	}
	return os.RemoveAll(old)
}
