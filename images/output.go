package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// OutputOptions steer the writers.
type OutputOptions struct {
	// Progress receives the bytes of each layer read while writing
	// (stage "write" for layouts and tarballs, "push" for registries).
	Progress ProgressFunc
	// Insecure allows plain HTTP to the registry (Push only).
	Insecure bool
	// Attempts bounds how often a failing registry request is tried
	// (Push only; 0 means the go-containerregistry default of 3).
	Attempts int
}

// RefNameAnnotation tags an image inside an OCI layout (what
// `skopeo inspect oci:DIR:TAG` and `umoci unpack --image DIR:TAG` look up).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// ClobberError refuses to replace a path that is not an OCI layout.
type ClobberError struct {
	Path   string
	Reason string
}

func (e *ClobberError) Error() string {
	return fmt.Sprintf("refusing to write an OCI layout to %s: %s", e.Path, e.Reason)
}

// WriteLayout writes img as an OCI image layout at dir, tagged tag. The
// layout is built in a temporary directory next to dir and renamed into
// place, so a failure (a full disk, a cancelled ctx) leaves no half-written
// layout; an existing layout at dir is replaced, any other non-empty
// directory or file is refused.
func WriteLayout(ctx context.Context, img v1.Image, dir, tag string, o OutputOptions) error {
	dir = filepath.Clean(dir)
	if tag == "" {
		tag = "latest"
	}
	existing := false
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return &ClobberError{Path: dir, Reason: "it is not a directory"}
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("writing OCI layout: %w", err)
		}
		if len(ents) > 0 {
			if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
				return &ClobberError{Path: dir, Reason: "it is a non-empty directory without an oci-layout file"}
			}
		}
		existing = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("writing OCI layout: %w", err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+"-*.tmp")
	if err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	pimg := withProgress(ctx, img, "write", o.Progress)
	if err := p.AppendImage(pimg, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag})); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	if existing {
		old := tmp + ".old"
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("replacing OCI layout %s: %w", dir, err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			if rerr := os.Rename(old, dir); rerr != nil {
				return fmt.Errorf("replacing OCI layout %s: %w (and restoring the old one: %w; it is at %s)", dir, err, rerr, old)
			}
			return fmt.Errorf("replacing OCI layout %s: %w", dir, err)
		}
		done = true
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("removing the replaced OCI layout %s: %w", old, err)
		}
		return nil
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	done = true
	return nil
}

// WriteTarball writes img as a docker-loadable tarball (`docker load -i
// file`) tagged tag (e.g. "tritonserver:dev"), through a temporary file
// renamed into place.
func WriteTarball(ctx context.Context, img v1.Image, file, tag string, o OutputOptions) error {
	t, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("writing tarball %s: tag %q: %w", file, tag, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+"-*.tmp")
	if err != nil {
		return fmt.Errorf("writing tarball %s: %w", file, err)
	}
	tmp.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmp.Name())
		}
	}()
	pimg := withProgress(ctx, img, "write", o.Progress)
	if err := tarball.WriteToFile(tmp.Name(), t, pimg); err != nil {
		return fmt.Errorf("writing tarball %s: %w", file, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing tarball %s: %w", file, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing tarball %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("writing tarball %s: %w", file, err)
	}
	done = true
	return nil
}

// PushError reports a failed push; Err carries the registry's answer.
type PushError struct {
	Ref string
	Err error
}

func (e *PushError) Error() string { return fmt.Sprintf("pushing %s: %v", e.Ref, e.Err) }
func (e *PushError) Unwrap() error { return e.Err }

// Push uploads img to the registry reference ref (a tag or a repository)
// with credentials from the default keychain (docker config, credential
// helpers) and returns the pushed image as repository@digest.
func Push(ctx context.Context, img v1.Image, ref string, o OutputOptions) (string, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return "", &PushError{Ref: ref, Err: fmt.Errorf("invalid reference: %w", err)}
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if o.Attempts > 0 {
		ropts = append(ropts, remote.WithRetryBackoff(remote.Backoff{Duration: time.Second, Factor: 3, Jitter: 0.1, Steps: o.Attempts}))
	}
	pimg := withProgress(ctx, img, "push", o.Progress)
	if err := remote.Write(r, pimg, ropts...); err != nil {
		return "", &PushError{Ref: ref, Err: err}
	}
	d, err := img.Digest()
	if err != nil {
		return "", &PushError{Ref: ref, Err: err}
	}
	return r.Context().Digest(d.String()).String(), nil
}

// withProgress wraps img so that reading a layer's compressed bytes reports
// progress and stops when ctx is done. Without a ProgressFunc only the
// cancellation is added.
func withProgress(ctx context.Context, img v1.Image, stage string, f ProgressFunc) v1.Image {
	var mu sync.Mutex
	report := func(p Progress) {
		if f == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f(p)
	}
	return &progressImage{Image: img, ctx: ctx, stage: stage, report: report}
}

type progressImage struct {
	v1.Image
	ctx    context.Context
	stage  string
	report func(Progress)
}

func (p *progressImage) Layers() ([]v1.Layer, error) {
	ls, err := p.Image.Layers()
	if err != nil {
		return nil, err
	}
	out := make([]v1.Layer, len(ls))
	for i, l := range ls {
		out[i] = &progressLayer{Layer: l, img: p}
	}
	return out, nil
}

func (p *progressImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	l, err := p.Image.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	return &progressLayer{Layer: l, img: p}, nil
}

type progressLayer struct {
	v1.Layer
	img *progressImage
}

func (l *progressLayer) Compressed() (io.ReadCloser, error) {
	rc, err := l.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	d, _ := l.Digest()
	size, _ := l.Size()
	return &progressReader{rc: rc, img: l.img, name: d.String(), total: size}, nil
}

type progressReader struct {
	rc          io.ReadCloser
	img         *progressImage
	name        string
	done, total int64
	last        int64
}

// progressStep is how many bytes pass between progress reports.
const progressStep = 8 << 20

func (r *progressReader) Read(b []byte) (int, error) {
	if err := r.img.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.rc.Read(b)
	r.done += int64(n)
	if r.done-r.last >= progressStep || (err == io.EOF && r.done != r.last) {
		r.last = r.done
		r.img.report(Progress{Stage: r.img.stage, Name: r.name, Done: r.done, Total: r.total})
	}
	return n, err
}

func (r *progressReader) Close() error { return r.rc.Close() }
