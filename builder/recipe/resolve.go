package recipe

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// BaseDir is what the recipe's relative local sources and patches resolve
// against: its directory, or the project root for built-ins.
func (r *Recipe) BaseDir() string { return r.baseDir }

// ResolvePath resolves a local source or patch path of the recipe. For
// built-in recipes projectDir (when set) replaces the base directory.
func (r *Recipe) ResolvePath(p, projectDir string) string {
	if filepath.IsAbs(p) {
		return p
	}
	base := r.baseDir
	if r.builtin && projectDir != "" {
		base = projectDir
	}
	return filepath.Join(base, p)
}

// Canonical is the recipe as hashed: the decoded struct with only the
// selected version, re-encoded as JSON, so formatting and comments in the
// YAML do not change hashes but every field that can change the tree
// does. The scheduling hints do not: memory sizes only the job counts (the
// counts themselves vary by machine and were never hashed), disk is only
// checked by doctor, so tuning either must not rebuild a node (LLVM's
// build takes hours).
func (r *Recipe) Canonical(v *Version) (json.RawMessage, error) {
	c := *r
	c.Versions = []Version{*v}
	c.Description, c.Homepage = "", ""
	c.Memory, c.Disk = MemoryProfile{}, 0
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encoding recipe %s: %w", r.Name, err)
	}
	return b, nil
}

// ResolveOptions merges build.yaml values over the recipe's defaults, with
// types checked.
func (r *Recipe) ResolveOptions(set map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for name, o := range r.Options {
		v, _ := coerceOption(o, o.Default)
		out[name] = v
	}
	for name, v := range set {
		o, ok := r.Options[name]
		if !ok {
			return nil, fmt.Errorf("build config sets option %s.%s, but recipe %s declares no such option (it has: %s)", r.Name, name, r.file, strings.Join(sortedKeys(r.Options), ", "))
		}
		cv, err := coerceOption(o, v)
		if err != nil {
			return nil, fmt.Errorf("build config option %s.%s: %w", r.Name, name, err)
		}
		out[name] = cv
	}
	return out, nil
}

// Excluded reports whether a local source leaves the slash path rel (relative
// to its directory) out of its hash and its copy. Patterns are globs as in
// path.Match plus "**" for any number of path components (so
// "**/*_test.go" names test files at any depth). rel is left out when an
// exclude pattern matches it or one of its parent directories, or when
// include patterns are given and none matches it, or one of its parents,
// and it is not a directory on the way to something one of them can match.
func (s *Source) Excluded(rel string) bool {
	parts := strings.Split(rel, "/")
	if matchesPrefix(s.Exclude, parts) {
		return true
	}
	if len(s.Include) == 0 {
		return false
	}
	return !matchesPrefix(s.Include, parts) && !leadsTo(s.Include, parts)
}

// matchesPrefix reports whether a pattern matches the path parts or one of
// its leading directories.
func matchesPrefix(patterns, parts []string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/")
		for i := 1; i <= len(parts); i++ {
			if ok, _ := doublestar.Match(p, strings.Join(parts[:i], "/")); ok {
				return true
			}
		}
	}
	return false
}

// leadsTo reports whether parts could be a directory above a path that a
// pattern matches: the pattern's leading components match parts, or a "**"
// among them already does (it matches everything below).
func leadsTo(patterns, parts []string) bool {
	dir := strings.Join(parts, "/")
	for _, p := range patterns {
		pc := strings.Split(strings.TrimSuffix(p, "/"), "/")
		for i, c := range pc {
			if c == "**" {
				if ok, _ := doublestar.Match(strings.Join(pc[:i+1], "/"), dir); ok {
					return true
				}
				break
			}
		}
		if len(parts) < len(pc) {
			if ok, _ := doublestar.Match(strings.Join(pc[:len(parts)], "/"), dir); ok {
				return true
			}
		}
	}
	return false
}

// Expand substitutes the ${NAME} references of s that value knows; the
// others stay as written (for the shell).
func Expand(s string, value func(name string) (string, bool)) string {
	return refRE.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := value(m[2 : len(m)-1]); ok {
			return v
		}
		return m
	})
}

// SoleRef reports whether s is exactly one ${...} reference, and its name.
func SoleRef(s string) (string, bool) {
	m := refRE.FindStringSubmatch(s)
	if m == nil || m[0] != s {
		return "", false
	}
	return m[1], true
}

// DefaultConfig is the configuration used when a project has no
// build.yaml: every setting at its default, relative paths anchored at dir.
func DefaultConfig(dir string) *Config {
	return &Config{file: "(defaults)", dir: dir}
}
