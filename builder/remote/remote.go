// Package remote is tritonbuild's shared binary cache: install trees of the
// store kept as OCI artifacts in any OCI registry, tagged by node hash, so
// that a team or CI machine pulls what someone else already built.
//
// One node is one manifest in repository REPO tagged with the node's full
// hash (64 hex digits; tags may hold 128 characters), so asking "is this
// built?" is one HEAD request. The manifest's config blob (media type
// ConfigMediaType) is the node's store manifest: NodeMeta plus every file's
// path, mode, size, sha256 and link target and the tree digest. Its single
// layer (LayerMediaType) is a deterministic gzip'd tar of the tree.
//
// Pulling trusts nothing it downloads: the layer's bytes must match the
// digest the manifest names, extraction refuses unsafe entries, and the
// extracted tree must match the config's file list exactly (contents,
// modes, link targets, no extra or missing paths) and its digest before
// the tree may be committed into the store.
//
// Cache is one repository behind the builder's TreeCache interface
// (lookup, pull, push of one node). The package never writes the store,
// takes its locks or decides what a plan does: the builder's executor
// commits a pulled tree under the node's lock and falls back to building.
package remote

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/archive"
)

// Media types of a tree artifact.
const (
	ArtifactType    = "application/vnd.tritonbuild.tree.v1"
	ConfigMediaType = types.MediaType("application/vnd.tritonbuild.tree.config.v1+json")
	LayerMediaType  = types.MediaType("application/vnd.tritonbuild.tree.layer.v1.tar+gzip")
)

// maxConfig bounds the config blob read into memory: a manifest of a
// hundred thousand files is a few tens of MB.
const maxConfig = 256 << 20

// Options configure registry access.
type Options struct {
	// Insecure talks plain HTTP (and accepts any certificate), for a
	// registry on loopback or a trusted network.
	Insecure bool
	// Keychain resolves credentials; nil means authn.DefaultKeychain
	// (docker config.json, credential helpers).
	Keychain authn.Keychain
	// Transport replaces the HTTP transport (tests, proxies).
	Transport http.RoundTripper
}

func (o Options) remote(ctx context.Context) []remote.Option {
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	if o.Transport != nil {
		opts = append(opts, remote.WithTransport(o.Transport))
	}
	return opts
}

func (o Options) repo(ref string) (name.Repository, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.NewRepository(ref, nopts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("binary cache repository %q: %w", ref, err)
	}
	return r, nil
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (o Options) tag(ref, hash string) (name.Repository, name.Tag, error) {
	if !hashRE.MatchString(hash) {
		return name.Repository{}, name.Tag{}, fmt.Errorf("node hash %q is not 64 lower-case hex digits", hash)
	}
	repo, err := o.repo(ref)
	if err != nil {
		return repo, name.Tag{}, err
	}
	return repo, repo.Tag(hash), nil
}

// Has reports whether the repository holds a tree for hash: one HEAD
// request. A missing tag is (false, nil); any other failure is an error.
func Has(ctx context.Context, ref, hash string, opts Options) (bool, error) {
	_, tag, err := opts.tag(ref, hash)
	if err != nil {
		return false, err
	}
	if _, err := remote.Head(tag, opts.remote(ctx)...); err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, fmt.Errorf("looking up %s: %w", tag, err)
	}
	return true, nil
}

// Pushed describes an uploaded tree artifact.
type Pushed struct {
	Ref    string  // REPO:HASH
	Digest v1.Hash // the manifest's digest
	Size   int64   // the layer's compressed size
}

// Push uploads a committed store node (nodeDir holds tree/ and
// manifest.json) as REPO:<hash>. The tree is checked against its manifest
// first, so a store corrupted on disk is never shared.
func Push(ctx context.Context, ref, nodeDir string, opts Options) (*Pushed, error) {
	m, err := readManifest(filepath.Join(nodeDir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	tree := filepath.Join(nodeDir, "tree")
	if err := Verify(tree, m); err != nil {
		return nil, fmt.Errorf("pushing %s: the store's copy does not match its manifest: %w", nodeDir, err)
	}
	repo, tag, err := opts.tag(ref, m.Hash)
	if err != nil {
		return nil, fmt.Errorf("pushing %s: %w", nodeDir, err)
	}
	tmp, err := os.CreateTemp("", "tritonbuild-tree-*.tar.gz")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := WriteTree(ctx, tmp, tree, m); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("packing %s: %w", tree, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromFile(tmp.Name(), tarball.WithMediaType(LayerMediaType))
	if err != nil {
		return nil, err
	}
	cfgData, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	cfg := static.NewLayer(cfgData, ConfigMediaType)
	ropts := opts.remote(ctx)
	for _, l := range []v1.Layer{cfg, layer} {
		if err := remote.WriteLayer(repo, l, ropts...); err != nil {
			return nil, fmt.Errorf("uploading %s's blobs to %s: %w", m.Name, repo, err)
		}
	}
	cfgDesc, err := descriptor(cfg)
	if err != nil {
		return nil, err
	}
	layerDesc, err := descriptor(layer)
	if err != nil {
		return nil, err
	}
	layerDesc.Annotations = map[string]string{"org.opencontainers.image.title": m.Name + "-" + m.Version + ".tar.gz"}
	man := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        *cfgDesc,
		Layers:        []v1.Descriptor{*layerDesc},
		Annotations: map[string]string{
			"org.opencontainers.image.title":   m.Name,
			"org.opencontainers.image.version": m.Version,
			"dev.tritonbuild.node.hash":        m.Hash,
			"dev.tritonbuild.tree.digest":      m.Digest,
			StoreRootAnnotation:                storeRoot(nodeDir),
		},
	}
	if m.StoreRoot != "" {
		man.Annotations[RelocatableAnnotation] = "true"
	}
	raw, err := json.Marshal(man)
	if err != nil {
		return nil, err
	}
	if err := remote.Put(tag, rawManifest(raw), ropts...); err != nil {
		return nil, fmt.Errorf("tagging %s: %w", tag, err)
	}
	sum := sha256.Sum256(raw)
	return &Pushed{Ref: tag.String(), Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}, Size: layerDesc.Size}, nil
}

// StoreRootAnnotation names the store root a tree was built for. Trees
// hold their own absolute prefix (rpaths, CMake config files), which lies
// inside the store, so a tree is only usable by stores at the same root.
const StoreRootAnnotation = "dev.tritonbuild.store.root"

// RelocatableAnnotation is "true" on trees whose manifest records the
// files that name the store root (see builder.RelocateStoreTree): such a
// tree is usable by a store at any root. Trees without it predate
// relocation and only serve stores at their own root.
const RelocatableAnnotation = "dev.tritonbuild.tree.relocatable"

// storeRoot is the store that holds nodeDir (ROOT/nodes/NODE).
func storeRoot(nodeDir string) string {
	abs, err := filepath.Abs(nodeDir)
	if err != nil {
		abs = nodeDir
	}
	return filepath.Dir(filepath.Dir(abs))
}

// Lookup fetches the manifest of REPO:<hash> and returns its annotations,
// or nil when the tag does not exist. One GET of a small document.
func Lookup(ctx context.Context, ref, hash string, opts Options) (map[string]string, error) {
	_, tag, err := opts.tag(ref, hash)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(tag, opts.remote(ctx)...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("looking up %s: %w", tag, err)
	}
	var man v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &man); err != nil {
		return nil, fmt.Errorf("looking up %s: manifest: %w", tag, err)
	}
	if man.Annotations == nil {
		man.Annotations = map[string]string{}
	}
	return man.Annotations, nil
}

// rawManifest is a manifest that remote.Put sends as is.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

func descriptor(l v1.Layer) (*v1.Descriptor, error) {
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	size, err := l.Size()
	if err != nil {
		return nil, err
	}
	mt, err := l.MediaType()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Size: size, Digest: d}, nil
}

func readManifest(path string) (*store.Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading store manifest: %w", err)
	}
	return decodeManifest(data, path)
}

func decodeManifest(data []byte, where string) (*store.Manifest, error) {
	var m store.Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("tree manifest %s: %w", where, err)
	}
	if m.Hash == "" || m.Digest == "" {
		return nil, fmt.Errorf("tree manifest %s: no node hash or tree digest", where)
	}
	return &m, nil
}

// WriteTree writes the tree as a gzip'd tar with the entries of m in its
// order, through archive.WriteTar: owners are 0:0 without names, modes are
// the manifest's, times are the node's epoch and the gzip header is empty,
// so the same tree always gives the same bytes (and blob digest). Hard
// links are not recorded by the manifest, so each name carries its content.
func WriteTree(ctx context.Context, w io.Writer, root string, m *store.Manifest) error {
	entries := make([]archive.Entry, 0, len(m.Files))
	for _, f := range m.Files {
		e := archive.Entry{Name: f.Path, Mode: int64(f.Mode.Perm())}
		switch {
		case f.Mode.IsDir():
			e.Type = tar.TypeDir
		case f.Mode&fs.ModeSymlink != 0:
			e.Type, e.Link = tar.TypeSymlink, f.Link
		case f.Mode.IsRegular():
			e.Type, e.Size, e.Src = tar.TypeReg, f.Size, filepath.Join(root, filepath.FromSlash(f.Path))
		default:
			return fmt.Errorf("%s: unsupported mode %s", f.Path, f.Mode)
		}
		entries = append(entries, e)
	}
	gz := gzip.NewWriter(w)
	if err := archive.WriteTar(ctx, gz, entries, archive.TarOptions{ModTime: time.Unix(max(m.Epoch, 1), 0)}); err != nil {
		return err
	}
	return gz.Close()
}

// Pull downloads REPO:<hash> into dest (which must not exist): dest/tree
// is the verified tree and the returned manifest describes it. On any
// error dest is removed, so a refused artifact leaves nothing behind.
func Pull(ctx context.Context, ref, hash, dest string, opts Options) (m *store.Manifest, err error) {
	repo, tag, err := opts.tag(ref, hash)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dest); err == nil {
		return nil, fmt.Errorf("pulling %s: destination %s already exists", tag, dest)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dest)
		}
	}()
	ropts := opts.remote(ctx)
	desc, err := remote.Get(tag, ropts...)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", tag, err)
	}
	var man v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &man); err != nil {
		return nil, fmt.Errorf("pulling %s: manifest: %w", tag, err)
	}
	if man.Config.MediaType != ConfigMediaType || len(man.Layers) != 1 || man.Layers[0].MediaType != LayerMediaType {
		return nil, &ArtifactError{Ref: tag.String(), Detail: fmt.Sprintf("not a tritonbuild tree: config %s with %d layer(s)", man.Config.MediaType, len(man.Layers))}
	}
	cfgData, err := fetchBlob(repo, man.Config, maxConfig, ropts)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: config: %w", tag, err)
	}
	m, err = decodeManifest(cfgData, tag.String())
	if err != nil {
		return nil, err
	}
	if m.Hash != hash {
		return nil, &ArtifactError{Ref: tag.String(), Detail: fmt.Sprintf("config describes node hash %s", m.Hash)}
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, err
	}
	if err := fetchTree(ctx, repo, man.Layers[0], filepath.Join(dest, "tree"), ropts); err != nil {
		return nil, fmt.Errorf("pulling %s: %w", tag, err)
	}
	if err := Verify(filepath.Join(dest, "tree"), m); err != nil {
		return nil, fmt.Errorf("pulling %s: refusing the tree: %w", tag, err)
	}
	return m, nil
}

// ArtifactError says that what a tag points at is not a usable tree.
type ArtifactError struct {
	Ref, Detail string
}

func (e *ArtifactError) Error() string { return e.Ref + ": " + e.Detail }

// DigestError is a blob whose bytes do not match the digest that names it.
type DigestError struct {
	Blob string
	Want string
	Got  string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("blob %s: content has digest %s, manifest says %s (tampered or corrupted)", e.Blob, e.Got, e.Want)
}

// fetchBlob reads a small blob and checks its digest and size.
func fetchBlob(repo name.Repository, d v1.Descriptor, limit int64, ropts []remote.Option) ([]byte, error) {
	if d.Size > limit {
		return nil, fmt.Errorf("blob %s is %d bytes, over the limit of %d", d.Digest, d.Size, limit)
	}
	rc, err := openBlob(repo, d, ropts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	h := sha256.New()
	data, err := io.ReadAll(io.TeeReader(io.LimitReader(rc, limit+1), h))
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d.Digest.String() {
		return nil, &DigestError{Blob: d.Digest.String(), Want: d.Digest.String(), Got: got}
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

// openBlob streams a blob's raw bytes. ggcr verifies the digest too, but
// our own check runs first and names both digests.
func openBlob(repo name.Repository, d v1.Descriptor, ropts []remote.Option) (io.ReadCloser, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("blob %s: only sha256 digests are accepted", d.Digest)
	}
	l, err := remote.Layer(repo.Digest(d.Digest.String()), ropts...)
	if err != nil {
		return nil, err
	}
	return l.Compressed()
}

// hashingReader hashes everything read through it, so that a digest
// mismatch (which the inner verifier reports only as a read error) is
// classified by our own comparison and names both digests.
type hashingReader struct {
	r io.Reader
	h io.Writer
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	_, _ = h.h.Write(p[:n]) // a hash never fails a write
	return n, err
}

// fetchTree streams the layer through gzip into the extractor, then drains
// what the tar reader left unread and compares the layer's digest.
func fetchTree(ctx context.Context, repo name.Repository, d v1.Descriptor, dest string, ropts []remote.Option) error {
	rc, err := openBlob(repo, d, ropts)
	if err != nil {
		return err
	}
	defer rc.Close()
	sum := sha256.New()
	hr := &hashingReader{r: rc, h: sum}
	xerr := archive.ExtractTar(ctx, hr, dest, archive.Options{Name: "layer " + d.Digest.String(), AllowAbsoluteSymlinks: true})
	_, derr := io.Copy(io.Discard, hr)
	got := "sha256:" + hex.EncodeToString(sum.Sum(nil))
	if got != d.Digest.String() {
		os.RemoveAll(dest)
		return &DigestError{Blob: d.Digest.String(), Want: d.Digest.String(), Got: got}
	}
	if xerr != nil {
		os.RemoveAll(dest)
		return fmt.Errorf("extracting layer %s: %w", d.Digest, xerr)
	}
	if derr != nil {
		os.RemoveAll(dest)
		return fmt.Errorf("reading layer %s: %w", d.Digest, derr)
	}
	return nil
}

// MismatchError is a tree that differs from its manifest.
type MismatchError struct {
	Path string // "" when only the digest differs
	Want string
	Got  string
}

func (e *MismatchError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("tree digest %s, manifest says %s", e.Got, e.Want)
	}
	return fmt.Sprintf("%s: %s, manifest says %s", e.Path, e.Got, e.Want)
}

// Verify hashes the tree at root and compares it entry by entry with m:
// the same paths, types, permission bits, sizes, sha256 sums and link
// targets, and the same tree digest.
func Verify(root string, m *store.Manifest) error {
	got, err := store.BuildManifestFor(root, m.StoreRoot)
	if err != nil {
		return err
	}
	want := map[string]store.FileEntry{}
	for _, f := range m.Files {
		want[f.Path] = f
	}
	for _, g := range got.Files {
		w, ok := want[g.Path]
		if !ok {
			return &MismatchError{Path: g.Path, Want: "no such entry", Got: "present"}
		}
		delete(want, g.Path)
		if g != w {
			return &MismatchError{Path: g.Path, Want: describe(w), Got: describe(g)}
		}
	}
	for p := range want {
		return &MismatchError{Path: p, Want: "present", Got: "missing"}
	}
	if got.Digest != m.Digest {
		return &MismatchError{Want: m.Digest, Got: got.Digest}
	}
	return nil
}

func describe(f store.FileEntry) string {
	switch {
	case f.Mode&fs.ModeSymlink != 0:
		return fmt.Sprintf("symlink to %q", f.Link)
	case f.Mode.IsDir():
		return fmt.Sprintf("directory %s", f.Mode)
	}
	return fmt.Sprintf("file %s, %d bytes, sha256 %s", f.Mode, f.Size, f.SHA256)
}

// LayerDigest returns the digest of the tree layer of REPO:<hash>.
func LayerDigest(ctx context.Context, ref, hash string, opts Options) (string, error) {
	_, tag, err := opts.tag(ref, hash)
	if err != nil {
		return "", err
	}
	desc, err := remote.Get(tag, opts.remote(ctx)...)
	if err != nil {
		return "", fmt.Errorf("looking up %s: %w", tag, err)
	}
	var man v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &man); err != nil {
		return "", fmt.Errorf("looking up %s: manifest: %w", tag, err)
	}
	if len(man.Layers) != 1 {
		return "", &ArtifactError{Ref: tag.String(), Detail: fmt.Sprintf("%d layers, want 1", len(man.Layers))}
	}
	return man.Layers[0].Digest.String(), nil
}
