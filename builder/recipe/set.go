package recipe

import (
	"fmt"
	"path/filepath"
	"strings"
)

// SetError is a --set assignment that cannot apply: Flag is the
// assignment as typed, Msg what is wrong with it.
type SetError struct {
	Flag, Msg string
}

func (e *SetError) Error() string { return "--set " + e.Flag + ": " + e.Msg }

// SetSyntax is the grammar of --set, for help texts and errors.
const SetSyntax = "NAME.version=VERSION, NAME.options.OPTION=VALUE or NAME.external=PATH"

// ApplySets returns s with command-line assignments applied on top, in
// order (a later one wins), each checked against the recipes:
//
//   - NAME.version=V pins NAME to V, which must be one of its versions; an
//     empty V drops a pin that build.yaml or the profile made;
//   - NAME.options.OPTION=VALUE sets an option NAME declares, VALUE parsed
//     by the option's type: bool (true/false, on/off, yes/no, 1/0), enum
//     (one of its values), list (comma-separated, empty for none), string;
//   - NAME.external=PATH uses an installed prefix instead of building NAME
//     (the recipe's probe still decides); an empty PATH builds it again.
//     A relative PATH resolves against dir, where it was typed.
//
// s itself is not modified.
func ApplySets(s Settings, set *Set, assignments []string, dir string) (Settings, error) {
	if len(assignments) == 0 {
		return s, nil
	}
	s.Versions = copyMap(s.Versions)
	s.Externals = copyMap(s.Externals)
	opts := map[string]map[string]any{}
	for r, m := range s.Options {
		opts[r] = map[string]any{}
		for k, v := range m {
			opts[r][k] = v
		}
	}
	s.Options = opts
	for _, a := range assignments {
		if err := applySet(&s, set, a, dir); err != nil {
			return s, err
		}
	}
	return s, nil
}

func applySet(s *Settings, set *Set, a, dir string) error {
	fail := func(format string, args ...any) error {
		return &SetError{Flag: a, Msg: fmt.Sprintf(format, args...)}
	}
	key, value, ok := strings.Cut(a, "=")
	if !ok {
		return fail("want %s", SetSyntax)
	}
	name, field, ok := strings.Cut(key, ".")
	if !ok || name == "" || field == "" {
		return fail("want %s", SetSyntax)
	}
	r := set.Get(name)
	if r == nil {
		return fail("no recipe is named %q (known: %s)", name, strings.Join(set.Names(), ", "))
	}
	switch {
	case field == "version":
		if value == "" {
			delete(s.Versions, name)
			return nil
		}
		if r.FindVersion(value) == nil {
			return fail("%s (%s) has no version %q; it has %s", name, r.file, value, r.VersionList())
		}
		s.Versions[name] = value
	case field == "external":
		if value == "" {
			delete(s.Externals, name)
			return nil
		}
		if r.Probe == nil {
			return fail("%s (%s) has no probe, so an installed copy cannot be checked and used", name, r.file)
		}
		if !filepath.IsAbs(value) {
			value = filepath.Join(dir, value)
		}
		s.Externals[name] = value
	case strings.HasPrefix(field, "options."):
		opt := strings.TrimPrefix(field, "options.")
		o, ok := r.Options[opt]
		if !ok {
			return fail("%s (%s) declares no option %q (it has: %s)", name, r.file, opt, strings.Join(sortedKeys(r.Options), ", "))
		}
		v, err := parseOptionValue(o, value)
		if err != nil {
			return fail("option %s of %s is %s", opt, name, err)
		}
		if s.Options[name] == nil {
			s.Options[name] = map[string]any{}
		}
		s.Options[name][opt] = v
	default:
		return fail("unknown field %q; want %s", field, SetSyntax)
	}
	return nil
}

// parseOptionValue reads a command-line value as the option's type; the
// error completes "option X of Y is ...".
func parseOptionValue(o Option, v string) (any, error) {
	switch o.Type {
	case OptBool:
		switch strings.ToLower(v) {
		case "true", "on", "yes", "1":
			return true, nil
		case "false", "off", "no", "0":
			return false, nil
		}
		return nil, fmt.Errorf("a bool: want true or false (or on/off, yes/no, 1/0), got %q", v)
	case OptEnum:
		if !contains(o.Values, v) {
			return nil, fmt.Errorf("an enum: want one of %s, got %q", strings.Join(o.Values, ", "), v)
		}
		return v, nil
	case OptList:
		v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
		out := []string{}
		if strings.TrimSpace(v) == "" {
			return out, nil
		}
		for _, e := range strings.Split(v, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				return nil, fmt.Errorf("a list: want comma-separated items, got an empty item in %q", v)
			}
			out = append(out, e)
		}
		return out, nil
	case OptString:
		return v, nil
	}
	return nil, fmt.Errorf("of unknown type %q", o.Type)
}

// VersionList describes the recipe's versions with their source kinds,
// e.g. "15.0.7 (url, default), 15.0.6 (apt)".
func (r *Recipe) VersionList() string {
	def := r.DefaultVersion()
	var out []string
	for i := range r.Versions {
		v := &r.Versions[i]
		d := string(v.Source.Kind())
		if v == def {
			d += ", default"
		}
		out = append(out, v.Version+" ("+d+")")
	}
	return strings.Join(out, ", ")
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
