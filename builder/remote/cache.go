package remote

import (
	"context"
	"path/filepath"

	"github.com/tritonbuild/tritonbuild/builder/store"
)

// Cache is one repository of a registry used as a binary cache: it has
// the lookup, pull and push of builder.TreeCache, each one node at a time.
// It never writes the store: the caller commits what Pull verified, under
// its own lock.
type Cache struct {
	// Ref is the repository, REGISTRY/PATH.
	Ref     string
	Options Options
}

// String names the cache by its repository.
func (c *Cache) String() string { return c.Ref }

// Lookup asks for the manifest of REPO:<hash> (one GET of a small
// document) and reports the store root the tree was built for and whether
// it is relocatable.
func (c *Cache) Lookup(ctx context.Context, hash string) (string, bool, bool, error) {
	ann, err := Lookup(ctx, c.Ref, hash, c.Options)
	if err != nil || ann == nil {
		return "", false, false, err
	}
	return ann[StoreRootAnnotation], ann[RelocatableAnnotation] == "true", true, nil
}

// Pull downloads and verifies the tree of hash into dir; see Pull.
func (c *Cache) Pull(ctx context.Context, hash, dir string) (*store.Manifest, error) {
	return Pull(ctx, c.Ref, hash, dir, c.Options)
}

// Push uploads the committed node in nodeDir unless the repository has a
// tree for its hash (one HEAD request).
func (c *Cache) Push(ctx context.Context, nodeDir string) (string, int64, error) {
	m, err := readManifest(filepath.Join(nodeDir, "manifest.json"))
	if err != nil {
		return "", 0, err
	}
	ok, err := Has(ctx, c.Ref, m.Hash, c.Options)
	if err != nil || ok {
		return "", 0, err
	}
	p, err := Push(ctx, c.Ref, nodeDir, c.Options)
	if err != nil {
		return "", 0, err
	}
	return p.Ref, p.Size, nil
}
