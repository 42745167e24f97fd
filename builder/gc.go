package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/store"
	"github.com/tritonbuild/tritonbuild/internal/envcache"
)

// GCOptions say what GC may remove.
type GCOptions struct {
	// Delete removes what GC finds; false only reports it (a dry run).
	Delete bool
	// Reachable holds the node directory names (name-version-hash16) that
	// some profile of build.yaml plans; every other committed node is
	// garbage. Nil keeps every node (when a profile could not be planned).
	Reachable map[string]bool
	// KeepCache is how many bytes of the image layer cache, and of the
	// python env cache, to keep (newest first).
	KeepCache int64
	// PythonEnvs is the server's extracted python env cache
	// (<cache>/tritonserver/python-envs); "" leaves it alone.
	PythonEnvs string
}

// GCItem is one thing GC removes (or would remove).
type GCItem struct {
	Path string `json:"path"`
	Why  string `json:"why"`
	Size int64  `json:"size"`
	// node is the store node whose lock guards Path (a node, staging or
	// work dir); nil for the caches.
	node *store.Key
	// pyenv marks an extracted env of the server's python env cache,
	// which its lock files guard (removePythonEnv).
	pyenv bool
}

// GC finds what the store no longer needs: staging and work directories
// of attempts that are not running (a failed build's work dir is kept for
// resuming until then), committed trees that no profile of build.yaml
// reaches, the source cache's leftovers of fetches that did not finish
// (sourceLeftovers), and image layers and python envs beyond
// opts.KeepCache. Nodes being built, pulled or pushed (their lock held)
// are skipped; a node's directory is removed under its exclusive lock,
// taken anew when it is removed, since listing and sizing may take long.
// Python envs some server uses or extracts are skipped the same way, and
// removed under their lock files' exclusive locks (envcache.Busy,
// removePythonEnv). With opts.Delete the items returned are those removed.
func GC(ctx context.Context, st *store.Store, opts GCOptions) ([]GCItem, error) {
	var items []GCItem
	add := func(path, why string, k store.Key) {
		items = append(items, GCItem{Path: path, Why: why, Size: dirSize(path), node: &k})
	}
	for _, area := range []struct{ dir, why string }{
		{"staging", "staging dir of an attempt that is not running"},
		{"work", "work dir of a failed or kept attempt"},
	} {
		entries, _ := os.ReadDir(filepath.Join(st.Root, area.dir))
		for _, e := range entries {
			key, ok := keyOfDir(strings.TrimSuffix(e.Name(), ".pull"), false)
			if !ok || busy(st, key) {
				continue
			}
			add(filepath.Join(st.Root, area.dir, e.Name()), area.why, key)
		}
	}
	if opts.Reachable != nil {
		entries, _ := os.ReadDir(filepath.Join(st.Root, "nodes"))
		for _, e := range entries {
			if opts.Reachable[e.Name()] {
				continue
			}
			key, ok := nodeKeyOfDir(st, e.Name())
			if !ok || busy(st, key) {
				continue
			}
			add(filepath.Join(st.Root, "nodes", e.Name()), "tree no profile of build.yaml reaches", key)
		}
	}
	items = append(items, sourceLeftovers(ctx, st.Sources(), time.Now())...)
	layers, _ := entriesByTime(filepath.Join(st.Root, "images", "layers")) // no layer cache, nothing to collect
	items = append(items, beyond(layers, opts.KeepCache, "image layer cache beyond the size kept")...)
	if opts.PythonEnvs != "" {
		for _, it := range beyond(pythonEnvs(opts.PythonEnvs), opts.KeepCache, "python env cache beyond the size kept") {
			if !envcache.Busy(it.Path) {
				it.pyenv = true
				items = append(items, it)
			}
		}
	}
	if !opts.Delete {
		return items, nil
	}
	var removed []GCItem
	for _, it := range items {
		ok, err := removeItem(st, it)
		if err != nil {
			return removed, err
		}
		if ok {
			removed = append(removed, it)
		}
	}
	return removed, nil
}

// removeItem removes what it names, holding its node's exclusive lock if
// it has one; it reports false when someone took that lock since GC looked
// (a build, a pull, a push of that node), and leaves the item alone.
func removeItem(st *store.Store, it GCItem) (bool, error) {
	if it.pyenv {
		return removePythonEnv(it.Path)
	}
	if it.node != nil {
		unlock, ok, err := st.TryLock(*it.node)
		if err != nil {
			return false, fmt.Errorf("gc: %s: %w", it.Path, err)
		}
		if !ok {
			return false, nil
		}
		defer unlock()
	}
	if err := store.RemoveTree(it.Path); err != nil {
		return false, fmt.Errorf("gc: removing %s: %w", it.Path, err)
	}
	return true, nil
}

// keyOfDir parses "name-hash16" (work, staging) or "name-version-hash16"
// (nodes) into the key the node's lock is named by.
func keyOfDir(name string, withVersion bool) (store.Key, bool) {
	i := strings.LastIndex(name, "-")
	if i <= 0 || len(name)-i-1 != 16 {
		return store.Key{}, false
	}
	k := store.Key{Name: name[:i], Hash: name[i+1:]}
	if withVersion {
		j := strings.LastIndex(k.Name, "-")
		if j <= 0 {
			return store.Key{}, false
		}
		k.Name, k.Version = k.Name[:j], k.Name[j+1:]
	}
	return k, true
}

// nodeKeyOfDir is keyOfDir of a committed node's directory, with the name
// its manifest records: the directory name alone cannot tell a '-' in the
// version from one in the name, and the lock is named by the name.
func nodeKeyOfDir(st *store.Store, dir string) (store.Key, bool) {
	k, ok := keyOfDir(dir, true)
	if !ok {
		return k, false
	}
	if data, err := os.ReadFile(filepath.Join(st.Root, "nodes", dir, "manifest.json")); err == nil {
		var meta store.NodeMeta
		if json.Unmarshal(data, &meta) == nil && meta.Name != "" && strings.HasPrefix(meta.Hash, k.Hash) {
			k.Name, k.Version = meta.Name, meta.Version
		}
	}
	return k, true
}

// busy reports whether someone holds the node's lock (building, pulling or
// pushing it); GC then leaves its directories alone. A lock that cannot be
// tried counts as held: GC removes nothing it is unsure of.
func busy(st *store.Store, k store.Key) bool {
	unlock, ok, err := st.TryLock(k)
	if err != nil || !ok {
		return true
	}
	unlock()
	return false
}

// staleTemp is how old an entry of the source cache's tmp/ must be for GC
// to take it for a fetch's leftover: nothing there names the fetch that
// made it, and no fetch (an LLVM clone included) runs for a day.
const staleTemp = 24 * time.Hour

// sourceLeftovers lists what fetches that did not finish left in the
// source cache: partial downloads whose digest no fetch holds (the next
// fetch of one starts over), and temporary files older than staleTemp.
func sourceLeftovers(ctx context.Context, c fetch.Cache, now time.Time) []GCItem {
	var items []GCItem
	parts, _ := os.ReadDir(filepath.Join(c.Dir, "partial"))
	for _, e := range parts {
		sha, ok := strings.CutSuffix(e.Name(), ".part")
		if !ok {
			continue
		}
		try, cancel := context.WithCancel(ctx)
		cancel()
		unlock, err := c.Lock(try, sha)
		if err != nil {
			continue // being fetched
		}
		unlock()
		p := filepath.Join(c.Dir, "partial", e.Name())
		items = append(items, GCItem{Path: p, Why: "interrupted download (the next fetch of it starts over)", Size: dirSize(p)})
	}
	tmps, _ := os.ReadDir(filepath.Join(c.Dir, "tmp"))
	for _, e := range tmps {
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleTemp {
			continue
		}
		p := filepath.Join(c.Dir, "tmp", e.Name())
		items = append(items, GCItem{Path: p, Why: "temporary file of a fetch that did not finish", Size: dirSize(p)})
	}
	return items
}

// beyond lists the entries of a cache, oldest first, past the newest keep
// bytes.
func beyond(list []timedEntry, keep int64, why string) []GCItem {
	var out []GCItem
	var kept int64
	for i := len(list) - 1; i >= 0; i-- {
		size := dirSize(list[i].path)
		if kept+size <= keep {
			kept += size
			continue
		}
		out = append(out, GCItem{Path: list[i].path, Why: why, Size: size})
	}
	return out
}

// pythonEnvs lists the extracted envs of the cache dir, least recently
// used first; its lock files are not entries.
func pythonEnvs(dir string) []timedEntry {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var list []timedEntry
	for _, e := range ents {
		if _, err := hex.DecodeString(e.Name()); err != nil || len(e.Name()) != 2*sha256.Size || !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		info, err := os.Stat(filepath.Join(p, envcache.ReadyMarker))
		if err != nil { // incomplete: last changed when its extraction stopped
			if info, err = e.Info(); err != nil {
				continue
			}
		}
		list = append(list, timedEntry{path: p, mod: info.ModTime().UnixNano(), dir: true})
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].mod < list[j].mod })
	return list
}

// removePythonEnv removes an extracted env and its lock files as the
// server's pruning does (envcache.Remove); it reports false, and leaves
// the env alone, when a server took one of its locks since GC looked.
func removePythonEnv(env string) (bool, error) {
	removed, err := envcache.Remove(env, false)
	if err != nil {
		return removed, fmt.Errorf("gc: removing python env %s: %w", env, err)
	}
	return removed, nil
}

func dirSize(p string) int64 {
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error { // the callback never fails: sizes are estimates
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// ReachableNodes plans the targets (and the image target) of build.yaml's
// settings and of each of its profiles, and returns the store directory
// names of every node they reach. A profile that cannot be planned here
// (an external probe fails, say) is an error: GC must then keep every
// tree, because it cannot tell which that profile needs.
func (p *Project) ReachableNodes(ctx context.Context) (map[string]bool, error) {
	profiles := []string{""}
	for name := range p.Config.Profiles {
		profiles = append(profiles, name)
	}
	sort.Strings(profiles)
	out := map[string]bool{}
	for _, prof := range profiles {
		s, err := p.Config.Resolve(prof)
		if err != nil {
			return nil, err
		}
		for name, path := range s.Externals {
			s.Externals[name] = p.Config.Abs(path)
		}
		targets := append([]string{}, s.Targets...)
		if s.Image != nil && s.Image.Target != "" {
			targets = append(targets, s.Image.Target)
		}
		if len(targets) == 0 {
			continue
		}
		plan, err := MakePlan(ctx, p.Recipes, PlanOptions{Settings: s, Targets: targets, Store: p.Store, ProjectDir: p.SourceDir})
		if err != nil {
			return nil, fmt.Errorf("planning profile %q: %w", profileName(prof), err)
		}
		for _, n := range plan.Nodes {
			if n.Status != StatusExternal {
				out[filepath.Base(p.Store.NodeDir(n.Key()))] = true
			}
		}
	}
	return out, nil
}

func profileName(p string) string {
	if p == "" {
		return "(default)"
	}
	return p
}
