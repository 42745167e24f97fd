package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
)

// ProjectOptions locate a project's config, recipes and store.
type ProjectOptions struct {
	// ConfigFile is build.yaml; when it does not exist and was not named
	// explicitly, defaults apply with the current directory as root.
	ConfigFile     string
	ConfigExplicit bool
	Profile        string
	RecipeDirs     []string // --recipes, overlaid after build.yaml's recipes_dirs
	StoreDir       string   // --store; else build.yaml, TRITONBUILD_STORE, cache dir
	Builtin        fs.FS    // the embedded built-in recipes
	BuiltinLabel   string
	// ProjectDirHint is where the built-in recipes' relative local sources
	// and patches live: the tritonbuild checkout. When it is empty,
	// BuiltinSources (the binary's embedded copy) is unpacked into the
	// store and used; when both are, the config's directory is.
	ProjectDirHint string
	BuiltinSources fs.FS
	// BuiltinConfig is tritonbuild's own build.yaml. When no build.yaml is
	// found, its profiles (and only those: the other settings stay at
	// their defaults) are what --profile chooses from.
	BuiltinConfig []byte
	// Sets are --set assignments applied over build.yaml and the profile
	// (recipe.ApplySets); relative external paths resolve against the
	// current directory.
	Sets []string
}

// Project is a loaded build.yaml, its recipes and its store.
type Project struct {
	Config   *recipe.Config
	Settings recipe.Settings
	Recipes  *recipe.Set
	Store    *store.Store
	// Dir is build.yaml's directory: its relative paths resolve there.
	Dir string
	// SourceDir anchors the built-in recipes' local sources and patches
	// (the checkout, or the embedded copy unpacked into the store).
	SourceDir string
}

// OpenProject loads build.yaml (with the profile applied), the built-in
// and user recipes, and opens the store.
func OpenProject(opts ProjectOptions) (*Project, error) {
	var cfg *recipe.Config
	if _, err := os.Stat(opts.ConfigFile); err == nil || opts.ConfigExplicit {
		c, err := recipe.LoadConfig(opts.ConfigFile)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		cfg = recipe.DefaultConfig(wd)
		if opts.BuiltinConfig != nil {
			b, err := recipe.ParseConfig("(built-in build.yaml)", opts.BuiltinConfig)
			if err != nil {
				return nil, fmt.Errorf("tritonbuild's own build.yaml: %w", err)
			}
			cfg.Profiles = b.Profiles
		}
	}
	settings, err := cfg.Resolve(opts.Profile)
	if err != nil {
		return nil, err
	}
	storeDir := opts.StoreDir
	if storeDir == "" {
		if os.Getenv("TRITONBUILD_STORE") != "" {
			storeDir = os.Getenv("TRITONBUILD_STORE")
		} else if settings.Store != "" {
			storeDir = cfg.Abs(settings.Store)
		} else {
			storeDir = store.DefaultDir()
		}
	}
	st, err := store.Open(storeDir)
	if err != nil {
		return nil, err
	}
	srcDir := opts.ProjectDirHint
	switch {
	case srcDir != "":
	case opts.BuiltinSources != nil:
		if srcDir, err = unpackSources(st, opts.BuiltinSources); err != nil {
			return nil, err
		}
	default:
		srcDir = cfg.Dir()
	}
	label := opts.BuiltinLabel
	if label == "" {
		label = "recipes"
	}
	dirs := []recipe.Dir{{FS: opts.Builtin, Label: label, BaseDir: srcDir, Builtin: true}}
	for _, d := range settings.RecipesDirs {
		dirs = append(dirs, recipe.OSDir(cfg.Abs(d)))
	}
	for _, d := range opts.RecipeDirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--recipes %s: not a directory", d)
		}
		dirs = append(dirs, recipe.OSDir(d))
	}
	set, err := recipe.Load(dirs...)
	if err != nil {
		return nil, err
	}
	for name, p := range settings.Externals {
		settings.Externals[name] = cfg.Abs(p)
	}
	if len(opts.Sets) > 0 {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		if settings, err = recipe.ApplySets(settings, set, opts.Sets, wd); err != nil {
			return nil, err
		}
	}
	return &Project{Config: cfg, Settings: settings, Recipes: set, Store: st, Dir: cfg.Dir(), SourceDir: srcDir}, nil
}

// Plan resolves targets (default: build.yaml's) against the store.
func (p *Project) Plan(ctx context.Context, targets, force []string) (*Plan, error) {
	return MakePlan(ctx, p.Recipes, PlanOptions{
		Settings:   p.Settings,
		Targets:    targets,
		Store:      p.Store,
		Force:      force,
		ProjectDir: p.SourceDir,
	})
}

// unpackSources puts the embedded copy of the built-in recipes' sources
// into <store>/builtin/<digest> once and returns that directory. The
// directory is complete or absent: it is written under a temporary name
// and renamed, and a copy another process finished first is used as is.
func unpackSources(st *store.Store, fsys fs.FS) (string, error) {
	digest, err := fetch.HashFS(fsys, nil)
	if err != nil {
		return "", fmt.Errorf("built-in sources: %w", err)
	}
	parent := filepath.Join(st.Root, "builtin")
	dir := filepath.Join(parent, digest[:16])
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("built-in sources: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".unpack-")
	if err != nil {
		return "", fmt.Errorf("built-in sources: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.CopyFS(tmp, fsys); err != nil {
		return "", fmt.Errorf("built-in sources: unpacking into %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return dir, nil
		}
		return "", fmt.Errorf("built-in sources: %w", err)
	}
	return dir, nil
}

var errNoLogs = errors.New("no logs")

// Logs lists the step logs of the node's latest build attempt, in the
// order the steps ran.
//
// When this plan's node has no logs (the build ran with another profile,
// other options or an older recipe), the newest attempt of any node of
// the same name is taken and other names its directory, so that
// `tritonbuild logs NAME` works without repeating the build's flags.
func (p *Project) Logs(n *Node) (logs []string, other string, err error) {
	dir := p.Store.LogDir(n.Key())
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		if latest := newestDir(filepath.Dir(dir)); latest != "" {
			l, _, err := p.logsIn(latest)
			return l, latest, err
		}
		return nil, "", fmt.Errorf("%s %s (%s): %w in %s: it has not been built yet", n.Name, n.Version, n.ShortHash(), errNoLogs, filepath.Dir(dir))
	}
	return p.logsIn(dir)
}

// newestDir returns the most recently changed non-empty subdirectory of
// dir, or "".
func newestDir(dir string) string {
	list, _ := entriesByTime(dir)
	for i := len(list) - 1; i >= 0; i-- {
		if es, _ := os.ReadDir(list[i].path); list[i].dir && len(es) > 0 {
			return list[i].path
		}
	}
	return ""
}

func (p *Project) logsIn(dir string) ([]string, string, error) {
	list, err := entriesByTime(dir)
	if err != nil {
		return nil, "", fmt.Errorf("reading logs: %w", err)
	}
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.path
	}
	return out, "", nil
}

// timedEntry is a directory entry with its modification time.
type timedEntry struct {
	path string
	mod  int64
	dir  bool
}

// entriesByTime lists the entries of dir, oldest first.
func entriesByTime(dir string) ([]timedEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var list []timedEntry
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		list = append(list, timedEntry{filepath.Join(dir, e.Name()), info.ModTime().UnixNano(), e.IsDir()})
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].mod < list[j].mod })
	return list, nil
}
