package fetch

import (
	"context"
	"strings"
)

// Source is a pinned source of any fetchable kind: URLSpec, AptSpec and
// GitSpec implement it, so an executor can fetch a recipe's sources without
// switching on their kind. Local directories are not Sources: they are read
// in place and pinned by HashDir.
type Source interface {
	// Digest names the content the source pins, without any I/O:
	// "sha256:<hex>" for files, "git:<commit>" (plus "+submodules") for
	// git checkouts. Plans hash it; equal digests mean equal bytes.
	Digest() string
	// Fetch returns the path of the source's file in the cache (a tar file
	// for git), fetching it when it is not there yet.
	Fetch(ctx context.Context, c Cache, opts Options) (string, error)
}

// Digest implements Source.
func (s URLSpec) Digest() string { return "sha256:" + strings.ToLower(s.SHA256) }

// Fetch implements Source with FetchURL.
func (s URLSpec) Fetch(ctx context.Context, c Cache, opts Options) (string, error) {
	return FetchURL(ctx, s, c, opts)
}

// Digest implements Source.
func (s AptSpec) Digest() string { return "sha256:" + strings.ToLower(s.SHA256) }

// Fetch implements Source with FetchApt.
func (s AptSpec) Fetch(ctx context.Context, c Cache, opts Options) (string, error) {
	return FetchApt(ctx, s, c, opts)
}

// Digest implements Source. The commit is the digest of a git source; with
// submodules the content differs, and so does the digest.
func (s GitSpec) Digest() string {
	d := "git:" + strings.ToLower(s.Commit)
	if s.Submodules {
		d += "+submodules"
	}
	return d
}

// Fetch implements Source with FetchGit.
func (s GitSpec) Fetch(ctx context.Context, c Cache, opts Options) (string, error) {
	return FetchGit(ctx, s, c, opts)
}
