package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/images"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// ImageRequest says which image to assemble from a plan and where to put it.
type ImageRequest struct {
	// Target is the recipe whose closure goes into the image.
	Target          string
	Tag             string
	Tarball         string
	Layout          string
	Push            string
	Insecure        bool
	Base            string
	ModelRepository string
	Python          bool
	// Epoch overrides SOURCE_DATE_EPOCH; zero derives it from the pins.
	Epoch time.Time
	// Progress receives layer progress.
	Progress images.ProgressFunc
	Out      io.Writer
}

// ImageResult reports what was assembled and whether it was reused.
type ImageResult struct {
	Summary images.Summary
	// Unchanged is true when every requested output already held this
	// exact image (same inputs), so nothing was written.
	Unchanged bool
	Digest    string
}

// Trees lists the install trees of the target's closure for image layers.
// Externals are not copied: their shared libraries reach the image through
// the ELF closure of the trees that link them.
func (p *Project) Trees(plan *Plan, target string) ([]images.Tree, error) {
	if plan.Node(target) == nil {
		return nil, fmt.Errorf("image target %q is not in the plan", target)
	}
	var trees []images.Tree
	for _, n := range plan.Closure(target) {
		if n.Status == StatusExternal {
			continue
		}
		if n.Status != StatusCached {
			return nil, fmt.Errorf("image: %s is not built yet (run tritonbuild build %s)", n.Name, target)
		}
		m, err := p.Store.Manifest(n.Key())
		if err != nil {
			return nil, err
		}
		t := images.Tree{Name: n.Name, Version: n.Version, Hash: n.Hash, Dir: p.Store.TreeDir(n.Key()),
			SourceURL: m.SourceURL, SHA256: m.SHA256, License: m.License, Homepage: m.Homepage}
		if m.Epoch > 0 {
			t.Epoch = time.Unix(m.Epoch, 0).UTC()
		}
		trees = append(trees, t)
	}
	return trees, nil
}

// BuildImage assembles the image of req.Target's closure and writes the
// requested outputs. Layers are cached in the store, and when the inputs
// (tree hashes, options, epoch, model repository contents) match what the
// outputs were last written from, nothing is rewritten.
func (p *Project) BuildImage(ctx context.Context, plan *Plan, req ImageRequest) (*ImageResult, error) {
	trees, err := p.Trees(plan, req.Target)
	if err != nil {
		return nil, err
	}
	epoch := req.Epoch
	if epoch.IsZero() {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			if epoch, err = images.ParseSourceDateEpoch(s); err != nil {
				return nil, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
			}
		} else {
			// The newest pinned release date in the closure, externals
			// included: never the clock.
			var newest int64
			for _, n := range plan.Closure(req.Target) {
				newest = max(newest, n.Ver.Epoch)
			}
			epoch = images.DefaultEpoch(trees)
			if t := time.Unix(newest, 0).UTC(); t.After(epoch) {
				epoch = t
			}
		}
	}
	key, err := imageKey(trees, req, epoch)
	if err != nil {
		return nil, err
	}
	stamp := filepath.Join(p.Store.Root, "images", "outputs.json")
	stamps := map[string]string{}
	if data, err := os.ReadFile(stamp); err == nil {
		_ = json.Unmarshal(data, &stamps) // a damaged stamp file only costs a rebuild of the outputs
	}
	outputs := map[string]string{}
	if req.Tarball != "" {
		outputs["tarball:"+absPath(req.Tarball)] = req.Tarball
	}
	if req.Layout != "" {
		outputs["layout:"+absPath(req.Layout)] = req.Layout
	}
	if req.Push == "" && len(outputs) > 0 {
		same := true
		for id, path := range outputs {
			if _, err := os.Stat(path); err != nil || stamps[id] != key {
				same = false
			}
		}
		if same {
			return &ImageResult{Unchanged: true, Digest: stamps["digest:"+key]}, nil
		}
	}
	opts := images.Options{
		Trees:           trees,
		ModelRepository: req.ModelRepository,
		Base:            req.Base,
		Insecure:        req.Insecure,
		Epoch:           epoch,
		Name:            req.Target,
		Version:         plan.Node(req.Target).Version,
		Source:          "tritonbuild",
		Revision:        plan.Node(req.Target).Hash,
		CacheDir:        filepath.Join(p.Store.Root, "images", "layers"),
		Progress:        req.Progress,
	}
	if req.Python {
		// The python backend runs model.py with the distribution's
		// interpreter (its default /usr/bin/python3); carry it with
		// numpy and torch.
		if opts.HostPaths, err = images.PythonHostPaths(images.PythonOptions{}); err != nil {
			return nil, err
		}
	}
	asm, err := images.Assemble(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer asm.Close()
	tag := req.Tag
	if tag == "" {
		tag = req.Target + ":latest"
	}
	oo := images.OutputOptions{Progress: req.Progress, Insecure: req.Insecure}
	if req.Layout != "" {
		if err := images.WriteLayout(ctx, asm.Image, req.Layout, tagOnly(tag), oo); err != nil {
			return nil, err
		}
	}
	if req.Tarball != "" {
		if err := os.MkdirAll(filepath.Dir(absPath(req.Tarball)), 0o755); err != nil {
			return nil, err
		}
		if err := images.WriteTarball(ctx, asm.Image, req.Tarball, tag, oo); err != nil {
			return nil, err
		}
	}
	res := &ImageResult{Summary: asm.Summary, Digest: asm.Summary.Digest.String()}
	if req.Push != "" {
		ref, err := images.Push(ctx, asm.Image, req.Push, oo)
		if err != nil {
			return nil, err
		}
		if req.Out != nil {
			fmt.Fprintf(req.Out, "pushed %s\n", ref)
		}
	}
	for id := range outputs {
		stamps[id] = key
	}
	stamps["digest:"+key] = res.Digest
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err == nil {
		if data, err := json.MarshalIndent(stamps, "", " "); err == nil {
			_ = atomicfile.WriteFile(stamp, data, 0o644) // the stamps only save work next time
		}
	}
	return res, nil
}

// imageKey identifies an image's inputs: the trees' hashes, the options
// and the model repository's contents.
func imageKey(trees []images.Tree, req ImageRequest, epoch time.Time) (string, error) {
	in := map[string]any{"epoch": strconv.FormatInt(epoch.Unix(), 10), "base": req.Base, "python": req.Python, "tag": req.Tag}
	var hashes []string
	for _, t := range trees {
		hashes = append(hashes, t.Name+"="+t.Hash)
	}
	in["trees"] = hashes
	// The scratch base and --python copy host files (shared libraries, the
	// interpreter): an upgrade of the host's packages must not leave a
	// stale image behind as "unchanged". The package database changes with
	// every install or upgrade.
	if req.Base == "" || req.Base == "scratch" {
		for _, f := range []string{"/var/lib/dpkg/status", "/etc/ld.so.cache"} {
			if st, err := os.Stat(f); err == nil {
				in["host:"+f] = strconv.FormatInt(st.Size(), 10) + "@" + strconv.FormatInt(st.ModTime().UnixNano(), 10)
			}
		}
	}
	if req.ModelRepository != "" {
		h, err := hashModelDir(req.ModelRepository)
		if err != nil {
			return "", fmt.Errorf("model repository %s: %w", req.ModelRepository, err)
		}
		in["models"] = h
	}
	return hashJSON(in), nil
}

// hashModelDir identifies what the image's model layer holds: the path,
// mode and content of every file of the repository at dir, a symlinked dir
// itself walked as the images package walks it. The images package copies
// what a link leading out of the repository leads to, so a change there
// changes the image: the key follows every link that leads somewhere to
// what it leads to (recording the link's text too), which covers those
// without repeating the images package's rule of which links leave. A
// link within the repository stays a link in the image, and what it leads
// to is hashed where it is as well, so following it only costs a walk:
// the content of each file is read once. A link to a directory being
// walked (a loop) and a dangling one are recorded by their text alone.
func hashModelDir(dir string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	h := &modelHasher{sum: sha256.New(), digests: map[fileID]string{}}
	h.enc = json.NewEncoder(h.sum)
	if err := h.walk(root, "", []string{root}); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.sum.Sum(nil)), nil
}

// modelHasher streams the entries of hashModelDir into one digest.
type modelHasher struct {
	sum     hash.Hash
	enc     *json.Encoder
	digests map[fileID]string // file content already read, by identity
}

// fileID is a file's identity on the host: a file reached through several
// links is read once.
type fileID struct{ dev, ino uint64 }

// walk hashes the entries of the real directory dir under the name rel;
// open are the real directories being walked, outermost first.
func (h *modelHasher) walk(dir, rel string, open []string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p, name := filepath.Join(dir, e.Name()), path.Join(rel, e.Name())
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fe := store.FileEntry{Path: name, Mode: info.Mode() & (fs.ModeType | fs.ModePerm)}
		if info.Mode()&fs.ModeSymlink != 0 {
			if fe.Link, err = os.Readlink(p); err != nil {
				return err
			}
			target, err := os.Stat(p)
			if err != nil { // dangling: the image carries the link
				if err := h.enc.Encode(fe); err != nil {
					return err
				}
				continue
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("resolving link %s: %w", p, err)
			}
			if target.IsDir() && slices.Contains(open, real) {
				if err := h.enc.Encode(fe); err != nil {
					return err
				}
				continue
			}
			p, info = real, target
			fe.Mode = info.Mode() & (fs.ModeType | fs.ModePerm)
		}
		switch {
		case info.Mode().IsRegular():
			fe.Size = info.Size()
			if fe.SHA256, err = h.digest(p, info); err != nil {
				return err
			}
		case info.IsDir():
		default:
			return fmt.Errorf("%s: unsupported file type %s in a model repository", p, info.Mode().Type())
		}
		if err := h.enc.Encode(fe); err != nil {
			return err
		}
		if info.IsDir() {
			if err := h.walk(p, name, append(open, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// digest is the sha256 of the regular file p, read once per run.
func (h *modelHasher) digest(p string, info fs.FileInfo) (string, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return store.FileSHA256(p)
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if d, ok := h.digests[id]; ok {
		return d, nil
	}
	d, err := store.FileSHA256(p)
	if err == nil {
		h.digests[id] = d
	}
	return d, err
}

func tagOnly(ref string) string {
	for i := len(ref) - 1; i >= 0; i-- {
		if ref[i] == ':' {
			return ref[i+1:]
		}
		if ref[i] == '/' {
			break
		}
	}
	return "latest"
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
