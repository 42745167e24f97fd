package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// Verify rebuilds name's closure into a fresh store at tmpStore and
// compares name's tree with the cached one, returning one line per path
// that differs (empty when the build is reproducible). The cached tree must
// exist; ex is used as a template (its output and options are kept).
func Verify(ctx context.Context, p *Project, name, tmpStore string, ex *Executor) ([]string, error) {
	plan, err := p.Plan(ctx, []string{name}, nil)
	if err != nil {
		return nil, err
	}
	n := plan.Node(name)
	if n.Status != StatusCached {
		return nil, fmt.Errorf("verify %s: nothing to compare with: it is %s (build it first)", name, n.Status)
	}
	want, err := p.Store.Manifest(n.Key())
	if err != nil {
		return nil, err
	}
	st, err := store.Open(tmpStore)
	if err != nil {
		return nil, err
	}
	fresh, err := MakePlan(ctx, p.Recipes, PlanOptions{Settings: p.Settings, Targets: []string{name}, Store: st, ProjectDir: p.SourceDir})
	if err != nil {
		return nil, err
	}
	if fresh.Node(name).Hash != n.Hash {
		return nil, fmt.Errorf("verify %s: the plan's hash changed between two plans (%s vs %s)", name, n.ShortHash(), fresh.Node(name).ShortHash())
	}
	vex := *ex
	vex.Store = st
	vex.Launcher = nil
	vex.Cache = nil // the point is to build it here
	if err := vex.Run(ctx, fresh, fresh.Nodes); err != nil {
		return nil, fmt.Errorf("verify %s: rebuilding: %w", name, err)
	}
	got, err := st.Manifest(fresh.Node(name).Key())
	if err != nil {
		return nil, err
	}
	return diffManifests(want, got), nil
}

func diffManifests(a, b *store.Manifest) []string {
	index := func(m *store.Manifest) map[string]store.FileEntry {
		out := map[string]store.FileEntry{}
		for _, f := range m.Files {
			out[f.Path] = f
		}
		return out
	}
	ia, ib := index(a), index(b)
	var out []string
	for p, fa := range ia {
		fb, ok := ib[p]
		switch {
		case !ok:
			out = append(out, "only in the cached tree: "+p)
		case fa != fb:
			out = append(out, fmt.Sprintf("differs: %s (%s %d %s -> %s %d %s)", p, fa.Mode, fa.Size, short(fa.SHA256+fa.Link), fb.Mode, fb.Size, short(fb.SHA256+fb.Link)))
		}
	}
	for p := range ib {
		if _, ok := ia[p]; !ok {
			out = append(out, "only in the rebuilt tree: "+p)
		}
	}
	sort.Strings(out)
	return out
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// InstallIfChanged installs nodes into prefix unless the prefix already
// holds exactly these trees (recorded in the store), so a no-op `all` does
// not copy anything.
func InstallIfChanged(ctx context.Context, st *store.Store, nodes []*Node, prefix string, opts InstallOptions) error {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return err
	}
	var hashes []string
	for _, n := range nodes {
		if n.Status != StatusExternal {
			hashes = append(hashes, n.Hash)
		}
	}
	// The check and the install are one step under the prefix's lock.
	unlock, err := st.LockPrefix(ctx, abs)
	if err != nil {
		return err
	}
	defer unlock()
	sum := sha256.Sum256([]byte(abs))
	stamp := filepath.Join(st.Root, "installs", hex.EncodeToString(sum[:8])+".json")
	want, _ := json.Marshal(map[string]any{"prefix": abs, "trees": hashes})
	if have, err := os.ReadFile(stamp); err == nil && string(have) == string(want) {
		// The stamp only says what this function installed last: the
		// prefix's own record must still list the same trees (another
		// install, or an interrupted one, may have changed it since).
		if rec, err := readInstallRecord(abs); err == nil && rec != nil && slices.Equal(rec.Trees, hashes) {
			return nil
		}
	}
	if _, err := install(ctx, st, nodes, abs, opts); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(stamp, want, 0o644)
}
