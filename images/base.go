package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// baseImage is what the trees are stacked on.
type baseImage struct {
	scratch bool
	layers  []v1.Layer
	usizes  []int64 // uncompressed sizes, 0 when unknown
	config  *v1.ConfigFile
	ref     string // registry reference, for the base.name label
	digest  string
}

// BaseError reports a base image that cannot be used.
type BaseError struct {
	Base string
	Err  error
}

func (e *BaseError) Error() string { return fmt.Sprintf("base image %q: %v", e.Base, e.Err) }
func (e *BaseError) Unwrap() error { return e.Err }

// loadBase opens o.Base: scratch, a rootfs tarball, an OCI layout or a
// registry image. A base that looks like a path is never tried as a
// registry reference, so a typo gives "no such file", not a network error.
func loadBase(ctx context.Context, o *Options, store *layerStore) (*baseImage, error) {
	b := o.Base
	if b == scratchBase {
		return &baseImage{scratch: true}, nil
	}
	st, statErr := os.Stat(b)
	looksLikePath := strings.HasPrefix(b, "/") || strings.HasPrefix(b, ".") || strings.HasSuffix(b, ".tar") || strings.HasSuffix(b, ".tar.gz") || strings.HasSuffix(b, ".tgz")
	switch {
	case statErr == nil && st.IsDir():
		return layoutBase(o, b)
	case statErr == nil:
		return rootfsBase(ctx, o, b, store)
	case looksLikePath:
		return nil, &BaseError{Base: b, Err: statErr}
	}
	return remoteBase(ctx, o, b)
}

// platformOf is the platform the base must match.
func platformOf(o *Options) v1.Platform {
	return v1.Platform{OS: "linux", Architecture: o.Arch}
}

// layoutBase picks the image for o.Arch from an OCI image layout.
func layoutBase(o *Options, dir string) (*baseImage, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, &BaseError{Base: dir, Err: errors.New("directory is not an OCI image layout (no oci-layout file)")}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, &BaseError{Base: dir, Err: err}
	}
	img, err := pickImage(idx, platformOf(o), 0)
	if err != nil {
		return nil, &BaseError{Base: dir, Err: err}
	}
	return imageBase(img, "", o)
}

// pickImage finds the first image in idx (descending into nested indexes)
// whose platform matches p, or that has no platform recorded.
func pickImage(idx v1.ImageIndex, p v1.Platform, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("image indexes nested too deeply")
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && (d.Platform.OS != p.OS || d.Platform.Architecture != p.Architecture) {
			continue
		}
		switch {
		case d.MediaType.IsImage():
			return idx.Image(d.Digest)
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := pickImage(child, p, depth+1); err == nil {
				return img, nil
			}
		}
	}
	return nil, fmt.Errorf("no image for %s/%s in the layout", p.OS, p.Architecture)
}

// remoteBase fetches the base's manifest and config from a registry; its
// layers are only read when the image is written.
func remoteBase(ctx context.Context, o *Options, s string) (*baseImage, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(s, nopts...)
	if err != nil {
		return nil, &BaseError{Base: s, Err: fmt.Errorf("neither a file, a directory nor a valid image reference: %w", err)}
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(platformOf(o)))
	if err != nil {
		return nil, &BaseError{Base: s, Err: err}
	}
	d, err := img.Digest()
	if err != nil {
		return nil, &BaseError{Base: s, Err: err}
	}
	return imageBase(img, ref.Context().Name()+"@"+d.String(), o)
}

// imageBase takes the layers and config of an existing image. Docker gzip
// layers are relabelled with the OCI media type (the bytes are the same
// format) so the result is a pure OCI manifest.
func imageBase(img v1.Image, ref string, o *Options) (*baseImage, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, &BaseError{Base: o.Base, Err: fmt.Errorf("reading config: %w", err)}
	}
	if cfg.Architecture != "" && cfg.Architecture != o.Arch {
		return nil, &BaseError{Base: o.Base, Err: fmt.Errorf("architecture %s, want %s", cfg.Architecture, o.Arch)}
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, &BaseError{Base: o.Base, Err: err}
	}
	b := &baseImage{config: cfg, ref: ref}
	if ref != "" {
		if i := strings.LastIndex(ref, "@"); i >= 0 {
			b.digest = ref[i+1:]
		}
	}
	for i, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, &BaseError{Base: o.Base, Err: fmt.Errorf("layer %d: %w", i, err)}
		}
		switch mt {
		case types.DockerLayer:
			l = ociLayer{l}
		case types.OCILayer, types.OCIUncompressedLayer, types.OCILayerZStd:
		default:
			return nil, &BaseError{Base: o.Base, Err: fmt.Errorf("layer %d: unsupported media type %s", i, mt)}
		}
		b.layers = append(b.layers, l)
		b.usizes = append(b.usizes, 0)
	}
	return b, nil
}

// ociLayer relabels a Docker gzip layer as an OCI gzip layer.
type ociLayer struct{ v1.Layer }

func (ociLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

// rootfsBase turns a root filesystem tarball (plain or gzip) into a single
// base layer. Its content is kept byte for byte (a gzip file's members, see
// gzipMembers); a plain tar is compressed with the fixed gzip header used
// for every layer.
func rootfsBase(ctx context.Context, o *Options, file string, store *layerStore) (*baseImage, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, &BaseError{Base: file, Err: err}
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	head, _ := br.Peek(2)
	gzipped := bytes.Equal(head, []byte{0x1f, 0x8b})

	tmp, err := os.CreateTemp(store.dir, ".rootfs-*.tmp")
	if err != nil {
		return nil, &BaseError{Base: file, Err: err}
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	comp := &countingHash{h: sha256.New()}
	uncomp := &countingHash{h: sha256.New()}
	out := bufio.NewWriterSize(io.MultiWriter(tmp, comp), 1<<20)
	var tarStream io.Reader
	if gzipped {
		// Keep exactly the compressed members; hash the decompressed
		// stream too.
		zr, err := newGzipMembers(br, out)
		if err != nil {
			return nil, &BaseError{Base: file, Err: err}
		}
		tarStream = io.TeeReader(zr, uncomp)
		if err := checkTar(ctx, tarStream); err != nil {
			return nil, &BaseError{Base: file, Err: err}
		}
	} else {
		gz, err := gzip.NewWriterLevel(out, o.CompressionLevel)
		if err != nil {
			return nil, err
		}
		tarStream = io.TeeReader(br, io.MultiWriter(gz, uncomp))
		if err := checkTar(ctx, tarStream); err != nil {
			return nil, &BaseError{Base: file, Err: err}
		}
		if err := gz.Close(); err != nil {
			return nil, &BaseError{Base: file, Err: err}
		}
	}
	if err := out.Flush(); err != nil {
		return nil, &BaseError{Base: file, Err: err}
	}
	if err := tmp.Close(); err != nil {
		return nil, &BaseError{Base: file, Err: err}
	}
	info := layerInfo{
		Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(comp.h.Sum(nil))},
		DiffID: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncomp.h.Sum(nil))},
		Size:   comp.n,
		USize:  uncomp.n,
	}
	dst := filepath.Join(store.dir, "rootfs-"+info.Digest.Hex+".tar.gz")
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return nil, &BaseError{Base: file, Err: err}
	}
	tmp = nil
	return &baseImage{layers: []v1.Layer{&fileLayer{path: dst, info: info}}, usizes: []int64{info.USize}}, nil
}

// gzipMembers reads the members of a gzip file one after the other as one
// stream, as gzip's multistream mode does, and copies the compressed bytes
// it consumes to keep, so that keep receives exactly the members. What
// follows the last member may be NUL padding (a tape's blocking, dd to a
// block size), which GNU gzip skips without a word ("decompression OK,
// trailing zero bytes ignored" only with --verbose); it is read and left
// out of keep, because a layer blob must hold nothing after its gzip data:
// containerd reads a layer's decompressed stream to its end, and Go's gzip
// reader, in containerd and here, takes the padding for a broken member
// header. Other bytes there are an error, as they are to gzip (a warning
// and exit status 2, "trailing garbage ignored", which fails tar -xz).
type gzipMembers struct {
	src *bufio.Reader
	in  *teeByteReader
	zr  *gzip.Reader
}

func newGzipMembers(src *bufio.Reader, keep *bufio.Writer) (*gzipMembers, error) {
	g := &gzipMembers{src: src, in: &teeByteReader{r: src, w: keep}}
	zr, err := gzip.NewReader(g.in)
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	g.zr = zr
	return g, nil
}

func (g *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		if !errors.Is(err, io.EOF) {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end comes back on the next call
		}
		// A member ended: another follows, or padding, or nothing.
		next, perr := g.src.Peek(2)
		switch {
		case len(next) == 0 && errors.Is(perr, io.EOF):
			return 0, io.EOF
		case len(next) == 0:
			return 0, perr
		case len(next) == 2 && next[0] == 0x1f && next[1] == 0x8b:
			if err := g.zr.Reset(g.in); err != nil {
				return 0, fmt.Errorf("gzip member at byte %d: %w", g.in.n, err)
			}
			g.zr.Multistream(false)
		default:
			return 0, g.padding()
		}
	}
}

// padding reads what follows the last member, without keeping it, and
// returns io.EOF when it is all NUL bytes.
func (g *gzipMembers) padding() error {
	end := g.in.n
	off := end
	buf := make([]byte, 32<<10)
	for {
		n, err := g.src.Read(buf)
		for i, b := range buf[:n] {
			if b != 0 {
				return fmt.Errorf("gzip data ends at byte %d and is followed by bytes other than NUL padding (byte %d is %#02x)", end, off+int64(i), b)
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if err != nil {
			return err
		}
	}
}

// teeByteReader copies what is read from r to w and counts it. Being an
// io.ByteReader, the gzip reader reads through it without buffering ahead,
// so it stops at the exact end of a member.
type teeByteReader struct {
	r *bufio.Reader
	w *bufio.Writer
	n int64
}

func (t *teeByteReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.n += int64(n)
		if _, werr := t.w.Write(p[:n]); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (t *teeByteReader) ReadByte() (byte, error) {
	b, err := t.r.ReadByte()
	if err != nil {
		return b, err
	}
	t.n++
	return b, t.w.WriteByte(b)
}

// checkTar reads a whole tar stream, failing if it is not a tar archive.
func checkTar(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("not a readable tar archive (entry %d): %w", n, err)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return fmt.Errorf("reading tar entry %d: %w", n, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("empty tar archive")
	}
	// Drain the end-of-archive padding so the digests cover every byte.
	_, err := io.Copy(io.Discard, r)
	return err
}
