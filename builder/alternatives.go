package builder

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// FetchError is a source that could not be fetched, with what else would
// get the build going: the recipe's versions that come from another kind
// of source, mirrors, an installed copy, the profiles that select those.
type FetchError struct {
	Name, Version string
	Err           error
	Alternatives  []string
}

func (e *FetchError) Error() string {
	msg := fmt.Sprintf("%s %s: fetching source: %v", e.Name, e.Version, e.Err)
	if len(e.Alternatives) == 0 {
		return msg
	}
	return msg + "\nwhat else gets " + e.Name + ":\n  - " + strings.Join(e.Alternatives, "\n  - ")
}

func (e *FetchError) Unwrap() error { return e.Err }

// SourceAlternatives lists, for a node whose source cannot be fetched,
// what else works, as commands and settings a person can use: the other
// versions of its recipe whose sources are of another kind (with the
// profiles of cfg that select them), a mirror for a download, an installed
// copy when the recipe can probe one (with the profiles that name one),
// and the profile names. cfg may be nil.
func SourceAlternatives(n *Node, cfg *recipe.Config) []string {
	r := n.Recipe
	kind := n.Ver.Source.Kind()
	var out []string
	for i := range r.Versions {
		v := &r.Versions[i]
		if v.Version == n.Version || v.Source.Kind() == kind {
			continue
		}
		alt := fmt.Sprintf("%s %s comes from %s: --set %s.version=%s", n.Name, v.Version, describeSource(v.Source), n.Name, v.Version)
		for _, p := range profilesWhere(cfg, func(s recipe.Settings) bool { return s.Versions[n.Name] == v.Version }) {
			alt += " or --profile " + p
		}
		if pk := r.HostPackagesOf(v); len(pk) > len(r.HostPackages) {
			alt += " (it builds against distribution packages: `tritonbuild doctor` lists what to install)"
		}
		out = append(out, alt)
	}
	if kind == recipe.SourceURL {
		file := path.Base(n.Ver.Source.URL)
		out = append(out, fmt.Sprintf("a mirror holding %s: add `mirrors: [BASE]` to build.yaml, fetched as BASE/%s/%s and checked against the recipe's sha256 (BASE may be a file:// directory you copied it into)", file, n.Name, file))
	}
	if r.Probe != nil {
		alt := fmt.Sprintf("an installed %s instead of building it: --set %s.external=PREFIX", n.Name, n.Name)
		for _, p := range profilesWhere(cfg, func(s recipe.Settings) bool { return s.Externals[n.Name] != "" }) {
			alt += fmt.Sprintf(" or --profile %s (%s)", p, cfg.Profiles[p].Externals[n.Name])
		}
		alt += "; its probe checks it"
		if h := firstHelp(r.Probe); h != "" {
			alt += " (" + h + ")"
		}
		out = append(out, alt)
	}
	if cfg != nil && len(cfg.Profiles) > 0 {
		out = append(out, "profiles of "+cfg.File()+": "+strings.Join(sortedProfiles(cfg), ", "))
	}
	return out
}

// describeSource says where a source comes from, for people.
func describeSource(s recipe.Source) string {
	switch s.Kind() {
	case recipe.SourceURL:
		return "a download of " + path.Base(s.URL)
	case recipe.SourceApt:
		return fmt.Sprintf("the distribution's source archive (apt source package %s %s)", s.Apt, s.AptVersion)
	case recipe.SourceGit:
		return fmt.Sprintf("the git repository %s at %s", s.Git, s.Tag)
	case recipe.SourceLocal:
		return "the local directory " + s.Local
	}
	return "an unknown kind of source"
}

func profilesWhere(cfg *recipe.Config, match func(recipe.Settings) bool) []string {
	if cfg == nil {
		return nil
	}
	var out []string
	for _, name := range sortedProfiles(cfg) {
		if match(cfg.Profiles[name]) {
			out = append(out, name)
		}
	}
	return out
}

func sortedProfiles(cfg *recipe.Config) []string {
	names := make([]string, 0, len(cfg.Profiles))
	for name := range cfg.Profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
