package recipe

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
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
// YAML do not change hashes but every semantic field does.
func (r *Recipe) Canonical(v *Version) (json.RawMessage, error) {
	c := *r
	c.Versions = []Version{*v}
	c.Description, c.Homepage = "", ""
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
			return nil, fmt.Errorf("build config option %s.%s: %v", r.Name, name, err)
		}
		out[name] = cv
	}
	return out, nil
}

// Excluded matches a slash path against the source's exclude patterns: a
// pattern matches the path itself or any directory prefix, with
// filepath.Match globs.
func (s *Source) Excluded(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range s.Exclude {
		p = strings.TrimSuffix(p, "/")
		for i := 1; i <= len(parts); i++ {
			if ok, _ := filepath.Match(p, strings.Join(parts[:i], "/")); ok {
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

// DefaultConfig is the configuration used when a project has no
// build.yaml: every setting at its default, relative paths anchored at dir.
func DefaultConfig(dir string) *Config {
	return &Config{file: "(defaults)", dir: dir}
}
