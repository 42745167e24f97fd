package pyenv

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/internal/archive"
)

// tree is the env's entries as they go into the archive.
type tree struct {
	entries  []archive.Entry
	unpacked int64
	sizes    map[string]int64 // site-packages top-level entry -> bytes
}

func (t *tree) add(e archive.Entry) {
	t.entries = append(t.entries, e)
	t.unpacked += e.Size
}

// sorted returns the entries by name: parents before children, the same
// order whatever the file system's.
func (t *tree) sorted() []archive.Entry {
	sort.Slice(t.entries, func(i, j int) bool { return t.entries[i].Name < t.entries[j].Name })
	return t.entries
}

// largest names the n biggest site-packages entries with their sizes.
func (t *tree) largest(n int) []string {
	names := make([]string, 0, len(t.sizes))
	for k := range t.sizes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if t.sizes[names[i]] != t.sizes[names[j]] {
			return t.sizes[names[i]] > t.sizes[names[j]]
		}
		return names[i] < names[j]
	})
	if len(names) > n {
		names = names[:n]
	}
	for i, k := range names {
		names[i] = fmt.Sprintf("%s (%s)", k, recipe.ByteSize(t.sizes[k]))
	}
	return names
}

// dropped are shell activation scripts that hard-code the env's directory
// and cannot be made relocatable as simply as bin/activate; the server
// never uses them (it sets PATH and VIRTUAL_ENV itself).
var dropped = map[string]bool{"bin/activate.csh": true, "bin/activate.fish": true}

var interpreterName = regexp.MustCompile(`^python[0-9.]*$`)

// rewriteLimit bounds the files read whole to be rewritten (activate,
// pyvenv.cfg, scripts in bin/); anything bigger naming the env's directory
// is refused.
const rewriteLimit = 1 << 20

// NotRelocatableError lists files that name the directory the env was
// built in, which would not exist where the server extracts it.
type NotRelocatableError struct {
	Dir   string
	Files []string
}

func (e *NotRelocatableError) Error() string {
	more := ""
	files := e.Files
	if len(files) > 10 {
		more = fmt.Sprintf(" and %d more", len(files)-10)
		files = files[:10]
	}
	return fmt.Sprintf("the env is not relocatable: these files name its directory %s, which does not exist where the server extracts it: %s%s",
		e.Dir, strings.Join(files, ", "), more)
}

// collect lists the env under root as archive entries below TopDir:
// directories 0755, files 0644 or 0755 (by their owner's exec bit), owners
// 0:0, no __pycache__, .pyc or .pyo, no csh/fish activation scripts, and
// the env's own directory replaced where a venv writes it (bin/activate,
// script shebangs, pyvenv.cfg's command line). Links must stay inside the
// env, except a venv's interpreter link to pyvenv.cfg's home, which the
// server allows too.
func collect(root string) (*tree, error) {
	cfg, err := readVenvConfig(root)
	if err != nil {
		return nil, err
	}
	// The env's directory as written into its files: as given, and with
	// symlinks resolved (a venv made under /tmp -> /private/tmp, say).
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	dirs := [][]byte{[]byte(root)}
	if real != root {
		dirs = append(dirs, []byte(real))
	}
	t := &tree{sizes: map[string]int64{}}
	var naming []string
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, p)
		rel = filepath.ToSlash(rel)
		name := TopDir
		if rel != "." {
			name += "/" + rel
		}
		switch {
		case d.IsDir():
			if d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			t.add(archive.Entry{Name: name, Type: tar.TypeDir, Mode: 0o755})
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			link, err := checkLink(root, rel, target, cfg, dirs)
			if err != nil {
				return err
			}
			t.add(archive.Entry{Name: name, Type: tar.TypeSymlink, Mode: 0o777, Link: link})
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: %s is neither a file, a directory nor a symlink", p, d.Type())
		}
		if strings.HasSuffix(rel, ".pyc") || strings.HasSuffix(rel, ".pyo") || dropped[rel] {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		e := archive.Entry{Name: name, Type: tar.TypeReg, Mode: 0o644, Size: st.Size(), Src: p}
		if st.Mode().Perm()&0o100 != 0 {
			e.Mode = 0o755
		}
		names, err := fileNames(p, st.Size(), dirs)
		if err != nil {
			return err
		}
		if names {
			data, ok, err := rewrite(p, rel, st.Size(), dirs)
			if err != nil {
				return err
			}
			if !ok {
				naming = append(naming, rel)
				return nil
			}
			e.Src, e.Data, e.Size = "", data, int64(len(data))
		}
		if i := strings.Index(rel, "/site-packages/"); i >= 0 {
			top, _, _ := strings.Cut(rel[i+len("/site-packages/"):], "/")
			t.sizes[top] += e.Size
		}
		t.add(e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(naming) > 0 {
		return nil, &NotRelocatableError{Dir: root, Files: naming}
	}
	return t, nil
}

// checkLink returns the link target to store, or why the server would
// refuse the link.
func checkLink(root, rel, target string, cfg venvConfig, dirs [][]byte) (string, error) {
	if filepath.IsAbs(target) {
		for _, d := range dirs {
			if within(string(d), target) {
				// Into the env by its absolute path: make it relative.
				r, err := filepath.Rel(filepath.Join(string(d), filepath.Dir(rel)), target)
				if err != nil {
					return "", err
				}
				return filepath.ToSlash(r), nil
			}
		}
		dir, base := path.Split(rel)
		if dir == "bin/" && interpreterName.MatchString(base) && cfg.home != "" &&
			filepath.Dir(filepath.Clean(target)) == cfg.home && interpreterName.MatchString(filepath.Base(target)) {
			return target, nil
		}
		return "", fmt.Errorf("%s: symlink to %s leaves the env (only a venv's bin/python* may point at its pyvenv.cfg home, %q); the server refuses it",
			filepath.Join(root, rel), target, cfg.home)
	}
	if resolved := path.Join(path.Dir(rel), filepath.ToSlash(target)); resolved == ".." || strings.HasPrefix(resolved, "../") {
		return "", fmt.Errorf("%s: symlink to %s leaves the env; the server refuses it", filepath.Join(root, rel), target)
	}
	return filepath.ToSlash(target), nil
}

// fileNames reports whether the file at p contains one of dirs, reading it
// in pieces that overlap by the longest needle.
func fileNames(p string, size int64, dirs [][]byte) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	keep := 0
	for _, d := range dirs {
		keep = max(keep, len(d)-1)
	}
	buf := make([]byte, keep+int(min(size, 1<<20))+1)
	n := 0
	for {
		m, err := f.Read(buf[n:])
		n += m
		for _, d := range dirs {
			if bytes.Contains(buf[:n], d) {
				return true, nil
			}
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if n > keep {
			copy(buf, buf[n-keep:n])
			n = keep
		}
	}
}

// rewrite replaces the env's directory in the files a venv writes it into
// and returns the new content; ok is false for any other file, or when the
// directory remains after the rewrite.
func rewrite(p, rel string, size int64, dirs [][]byte) (data []byte, ok bool, err error) {
	if size > rewriteLimit {
		return nil, false, nil
	}
	data, err = os.ReadFile(p)
	if err != nil {
		return nil, false, err
	}
	switch {
	case rel == "bin/activate":
		data = rewriteLines(data, func(line []byte) []byte {
			if bytes.HasPrefix(line, []byte("VIRTUAL_ENV=")) && namesAny(line, dirs) {
				// Relocatable: the env is the parent of this script's
				// directory (bash sets BASH_SOURCE, zsh sets $0).
				return []byte(`VIRTUAL_ENV="$(cd -- "$(dirname -- "${BASH_SOURCE[0]:-$0}")/.." && pwd)"`)
			}
			return line
		})
	case rel == "pyvenv.cfg":
		data = rewriteLines(data, func(line []byte) []byte {
			k, _, _ := bytes.Cut(line, []byte("="))
			if string(bytes.TrimSpace(k)) == "command" {
				return nil // informational: how the venv was made, and where
			}
			return line
		})
	case path.Dir(rel) == "bin" && bytes.HasPrefix(data, []byte("#!")):
		first, rest, _ := bytes.Cut(data, []byte("\n"))
		py := strings.Fields(string(first[2:]))
		if len(py) == 0 || !namesAny(first, dirs) || !interpreterName.MatchString(filepath.Base(py[0])) {
			return nil, false, nil
		}
		// A shell line that execs the env's python next to the script,
		// with the script itself: the quotes make it a no-op string for
		// python (pip writes the same for shebangs that are too long).
		head := fmt.Sprintf("#!/bin/sh\n'''exec' \"$(dirname -- \"$0\")/%s\" \"$0\" \"$@\"\n' '''\n", filepath.Base(py[0]))
		data = append([]byte(head), rest...)
	default:
		return nil, false, nil
	}
	if namesAny(data, dirs) {
		return nil, false, nil
	}
	return data, true, nil
}

func namesAny(b []byte, dirs [][]byte) bool {
	for _, d := range dirs {
		if bytes.Contains(b, d) {
			return true
		}
	}
	return false
}

// rewriteLines applies fn to each line; a nil result drops the line.
func rewriteLines(data []byte, fn func([]byte) []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		body, nl := bytes.CutSuffix(line, []byte("\n"))
		if r := fn(body); r != nil {
			out = append(out, r...)
			if nl {
				out = append(out, '\n')
			}
		}
	}
	return out
}
