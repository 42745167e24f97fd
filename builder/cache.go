package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/store"
)

// TreeCache is a shared cache of install trees keyed by node hash, where
// other machines' builds land (package builder/remote keeps them in an OCI
// registry). Planning asks it which nodes it holds (Plan.AskCache); the
// executor then uses it per node under the node's store lock: it pulls a
// tree the cache holds instead of building it, and pushes what it
// committed.
type TreeCache interface {
	// Lookup reports whether the cache holds the tree of the node hash,
	// the root of the store it was built for, and whether the tree is
	// relocatable to another root (its manifest lists the files naming
	// the root; trees pushed before relocation are not).
	Lookup(ctx context.Context, hash string) (root string, relocatable, ok bool, err error)
	// Pull downloads the tree of hash into dir, which must not exist, and
	// verifies it: dir/tree is exactly what the returned manifest lists.
	// On error dir is gone.
	Pull(ctx context.Context, hash, dir string) (*store.Manifest, error)
	// Push uploads the committed node in nodeDir unless the cache holds it
	// already. ref names what was uploaded ("" when nothing was) and size
	// is its size in bytes.
	Push(ctx context.Context, nodeDir string) (ref string, size int64, err error)
	// String names the cache in messages.
	String() string
}

// AskCache asks the cache about every node the plan would build (forced
// ones excepted) and marks StatusRemote those it holds for the store at
// root; the others' reasons say why they are not taken. It returns how
// many it marked. This is the one planning step that touches the network:
// it says so on out (when not nil) before the first request.
func (p *Plan) AskCache(ctx context.Context, c TreeCache, root string, out io.Writer) (int, error) {
	var ask []*Node
	for _, n := range p.Nodes {
		if n.Status == StatusBuild && !n.Forced {
			ask = append(ask, n)
		}
	}
	if len(ask) == 0 {
		return 0, nil
	}
	if out != nil {
		fmt.Fprintf(out, "asking binary cache %s about %d node(s)\n", c, len(ask))
	}
	marked := 0
	for _, n := range ask {
		builtFor, relocatable, ok, err := c.Lookup(ctx, n.Hash)
		if err != nil {
			return marked, fmt.Errorf("binary cache %s: %s: %w", c, n.Name, err)
		}
		switch {
		case !ok:
			n.Reason = "not in store or binary cache"
		case builtFor != root && !relocatable:
			// A tree from before relocation names its own prefix in
			// files its manifest does not list.
			n.Reason = fmt.Sprintf("binary cache has it for store %s, not %s, and it is not relocatable (pushed by an older tritonbuild)", builtFor, root)
		default:
			n.Status, n.Reason = StatusRemote, "in binary cache "+c.String()
			marked++
		}
	}
	return marked, nil
}

// Pull fills the store with the tree of every StatusRemote node among
// nodes, each under the node's lock, verified and committed by one rename,
// and marks it StatusCached. Unlike Run it builds nothing: the first
// refused tree is an error. It returns how many trees it pulled.
func (e *Executor) Pull(ctx context.Context, nodes []*Node) (int, error) {
	if e.Cache == nil {
		return 0, errors.New("pull: the executor has no binary cache")
	}
	pulled := 0
	for _, n := range nodes {
		if n.Status != StatusRemote {
			continue
		}
		ok, err := e.lockedPull(ctx, n)
		if err != nil {
			return pulled, err
		}
		if ok {
			pulled++
		}
	}
	return pulled, nil
}

// lockedPull is Pull of one node; it reports whether it pulled (another
// process may have committed the node meanwhile).
func (e *Executor) lockedPull(ctx context.Context, n *Node) (bool, error) {
	unlock, err := e.Store.Lock(ctx, n.Key())
	if err != nil {
		return false, err
	}
	defer unlock()
	if e.Store.Has(n.Key()) {
		n.Status, n.Reason = StatusCached, "in store"
		return false, nil
	}
	return true, e.pull(ctx, n)
}

// pull fetches a StatusRemote node's tree from the cache into its staging
// dir and commits it; the caller holds the node's lock.
func (e *Executor) pull(ctx context.Context, n *Node) error {
	start := time.Now()
	staging := e.Store.StagingDir(n.Key())
	// A leftover belongs to a killed attempt: we hold the lock.
	if err := store.RemoveTree(staging); err != nil {
		return fmt.Errorf("%s: clearing staging: %w", n.Name, err)
	}
	m, err := e.Cache.Pull(ctx, n.Hash, staging)
	if err != nil {
		return fmt.Errorf("%s %s: %w", n.Name, n.Version, err)
	}
	// Built under another store root: rewrite the files that name it.
	from := m.StoreRoot
	m, stuck, err := store.RelocateStoreTree(filepath.Join(staging, "tree"), m, e.Store.Root)
	if err != nil {
		_ = store.RemoveTree(staging) // the relocation's error is the one to report
		return fmt.Errorf("%s %s: relocating from store %s: %w", n.Name, n.Version, from, err)
	}
	if len(stuck) > 0 {
		e.printf("    warning: %s %s was built for store %s; %d binary file(s) still name it: %s\n", n.Name, n.Version, from, len(stuck), strings.Join(stuck, ", "))
	}
	if err := e.Store.Commit(n.Key(), staging, m); err != nil {
		_ = store.RemoveTree(staging) // the commit's error is the one to report
		return fmt.Errorf("%s %s: binary cache %s: %w", n.Name, n.Version, e.Cache, err)
	}
	n.Status, n.Reason = StatusCached, "pulled from "+e.Cache.String()
	e.stats.pulled++
	e.printf("==> %s %s pulled from %s: %d files, %s, in %s\n", n.Name, n.Version, e.Cache, len(m.Files), m.Digest[:19], time.Since(start).Round(time.Millisecond))
	return nil
}

// Push uploads the tree of every node among nodes that is in the store
// and not yet in the cache, each under the node's shared lock. It returns
// the number of trees uploaded.
func (e *Executor) Push(ctx context.Context, nodes []*Node) (int, error) {
	if e.Cache == nil {
		return 0, errors.New("push: the executor has no binary cache")
	}
	pushed := 0
	for _, n := range nodes {
		if n.Status == StatusExternal {
			continue
		}
		ok, err := e.lockedPush(ctx, n)
		if err != nil {
			return pushed, err
		}
		if ok {
			pushed++
		}
	}
	return pushed, nil
}

// lockedPush is push of a node whose lock the caller does not hold: it
// takes the node's lock shared for the whole upload, so that a forced
// rebuild or gc (which take it exclusively) cannot replace or remove the
// tree while it is read, and pushes nothing when the node is not in the
// store (any more: gc may have taken it since the plan was made).
func (e *Executor) lockedPush(ctx context.Context, n *Node) (bool, error) {
	unlock, err := e.Store.LockShared(ctx, n.Key(), func() {
		e.printf("==> %s %s: waiting to push it until another tritonbuild process, which holds its store lock (%s), is done\n", n.Name, n.Version, filepath.Join(e.Store.Root, "locks"))
	})
	if err != nil {
		return false, fmt.Errorf("%s %s: pushing to binary cache %s: %w", n.Name, n.Version, e.Cache, err)
	}
	defer unlock()
	if !e.Store.Has(n.Key()) {
		return false, nil
	}
	return e.push(ctx, n)
}

// push uploads one committed node unless the cache has it. The caller
// holds the node's lock, exclusive (the build that committed it) or
// shared (lockedPush).
func (e *Executor) push(ctx context.Context, n *Node) (bool, error) {
	start := time.Now()
	ref, size, err := e.Cache.Push(ctx, e.Store.NodeDir(n.Key()))
	if err != nil {
		return false, fmt.Errorf("%s %s: binary cache %s: %w", n.Name, n.Version, e.Cache, err)
	}
	if ref == "" {
		return false, nil
	}
	e.stats.pushed++
	e.printf("==> %s %s pushed to %s (%d bytes) in %s\n", n.Name, n.Version, ref, size, time.Since(start).Round(time.Millisecond))
	return true, nil
}
