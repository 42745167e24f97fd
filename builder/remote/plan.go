package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/store"
)

// PlanOptions configure the plan-level operations.
type PlanOptions struct {
	Options
	// Out receives one line per pulled or pushed node; nil is silent.
	Out io.Writer
	// BuildOnFailure turns a node whose pull fails (unreachable registry,
	// refused artifact) back into a build instead of failing the run.
	BuildOnFailure bool
}

func (o PlanOptions) printf(format string, args ...any) {
	if o.Out != nil {
		fmt.Fprintf(o.Out, format, args...)
	}
}

// Mark asks the registry about every node the plan would build (except
// forced ones) and marks those it holds for this store's root
// builder.StatusRemote. It returns how many it marked. Planning stays free
// of downloads: this is one small manifest GET per node.
func Mark(ctx context.Context, plan *builder.Plan, st *store.Store, ref string, opts PlanOptions) (int, error) {
	marked := 0
	for _, n := range plan.Nodes {
		if n.Status != builder.StatusBuild || n.Reason == "forced" {
			continue
		}
		ann, err := Lookup(ctx, ref, n.Hash, opts.Options)
		if err != nil {
			return marked, fmt.Errorf("binary cache %s: %s: %w", ref, n.Name, err)
		}
		switch {
		case ann == nil:
			n.Reason = "not in store or binary cache"
		case ann[StoreRootAnnotation] != st.Root:
			// The tree's rpaths and config files name its own prefix.
			n.Reason = fmt.Sprintf("binary cache has it for store %s, not %s", ann[StoreRootAnnotation], st.Root)
		default:
			n.Status, n.Reason = builder.StatusRemote, "in binary cache "+ref
			marked++
		}
	}
	return marked, nil
}

// PullPlan fetches every StatusRemote node among nodes into the store and
// marks it builder.StatusCached. Each node is pulled under the store lock
// that builds take, into a private staging dir, and committed by rename
// only after verification.
func PullPlan(ctx context.Context, st *store.Store, nodes []*builder.Node, ref string, opts PlanOptions) error {
	for _, n := range nodes {
		if n.Status != builder.StatusRemote {
			continue
		}
		if err := pullNode(ctx, st, n, ref, opts); err != nil {
			if !opts.BuildOnFailure {
				return err
			}
			opts.printf("==> %s %s: %v; building it instead\n", n.Name, n.Version, err)
			n.Status, n.Reason = builder.StatusBuild, "binary cache copy refused"
			continue
		}
		n.Status, n.Reason = builder.StatusCached, "pulled from "+ref
	}
	return nil
}

func pullNode(ctx context.Context, st *store.Store, n *builder.Node, ref string, opts PlanOptions) error {
	unlock, err := st.Lock(ctx, n.Key())
	if err != nil {
		return err
	}
	defer unlock()
	if st.Has(n.Key()) {
		return nil
	}
	start := time.Now()
	staging := st.StagingDir(n.Key())
	// A leftover belongs to a killed pull: we hold the lock.
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("%s: clearing staging: %w", n.Name, err)
	}
	m, err := Pull(ctx, ref, n.Hash, staging, opts.Options)
	if err != nil {
		return fmt.Errorf("%s %s: %w", n.Name, n.Version, err)
	}
	if m.Hash != n.Hash {
		os.RemoveAll(staging)
		return fmt.Errorf("%s %s: binary cache sent node %s", n.Name, n.Version, m.Hash)
	}
	if err := st.Commit(n.Key(), staging, m); err != nil {
		os.RemoveAll(staging)
		return err
	}
	opts.printf("==> %s %s pulled from %s: %d files, %s, in %s\n", n.Name, n.Version, ref, len(m.Files), m.Digest[:19], time.Since(start).Round(time.Millisecond))
	return nil
}

// PushPlan uploads every node among nodes that is in the store and not yet
// in the registry. It returns the number of nodes uploaded.
func PushPlan(ctx context.Context, st *store.Store, nodes []*builder.Node, ref string, opts PlanOptions) (int, error) {
	pushed := 0
	for _, n := range nodes {
		if n.Status == builder.StatusExternal || !st.Has(n.Key()) {
			continue
		}
		ok, err := Has(ctx, ref, n.Hash, opts.Options)
		if err != nil {
			return pushed, fmt.Errorf("binary cache %s: %s: %w", ref, n.Name, err)
		}
		if ok {
			continue
		}
		start := time.Now()
		p, err := Push(ctx, ref, st.NodeDir(n.Key()), opts.Options)
		if err != nil {
			return pushed, fmt.Errorf("%s %s: %w", n.Name, n.Version, err)
		}
		pushed++
		opts.printf("==> %s %s pushed to %s (%d bytes) in %s\n", n.Name, n.Version, p.Ref, p.Size, time.Since(start).Round(time.Millisecond))
	}
	return pushed, nil
}
