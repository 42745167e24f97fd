package toolchain

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// CcacheConfig puts ccache into the compile launcher chain, after the
// memory broker's launcher and before the compiler (or distcc):
//
//	tritonbuild launch -- ccache [distcc] cc -c ...
//
// Its settings make hits independent of the build's work dir, so a second
// work dir, another machine or a CI runner hits what the first one stored:
// paths under the work dir are rewritten relative (CCACHE_BASEDIR), the
// current directory is not hashed (CCACHE_NOHASHDIR; the builder's
// -ffile-prefix-map already keeps it out of the objects' debug info), and
// the compiler is identified by its contents, not its mtime.
type CcacheConfig struct {
	// Exe is the ccache program; "" means "ccache" on PATH.
	Exe string
	// Dir is the local cache (CCACHE_DIR); "" leaves ccache's default
	// (~/.cache/ccache).
	Dir string
	// Remote is a shared secondary storage, e.g. "http://cache:8080/ccache"
	// or "redis://cache" (CCACHE_REMOTE_STORAGE, ccache >= 4.4).
	Remote string
	// MaxSize bounds the local cache, in ccache's syntax ("20G").
	MaxSize string
}

// CcacheSloppiness relaxes checks that would miss for reasons that do not
// change the object: header mtimes/ctimes differ in a fresh checkout and
// __TIME__/__DATE__ are pinned by SOURCE_DATE_EPOCH in our builds.
const CcacheSloppiness = "include_file_mtime,include_file_ctime,time_macros,file_stat_matches"

// Inner returns the launcher words for Launcher.CMakeArgs(inner...).
func (c CcacheConfig) Inner() []string {
	if c.Exe != "" {
		return []string{c.Exe}
	}
	return []string{"ccache"}
}

// Env returns the settings for one build whose sources and build dir live
// under workDir.
func (c CcacheConfig) Env(workDir string) []string {
	env := []string{
		"CCACHE_BASEDIR=" + filepath.Clean(workDir),
		"CCACHE_NOHASHDIR=1",
		"CCACHE_SLOPPINESS=" + CcacheSloppiness,
		"CCACHE_COMPILERCHECK=content",
	}
	if c.Dir != "" {
		dir, err := filepath.Abs(c.Dir)
		if err != nil {
			dir = c.Dir
		}
		env = append(env, "CCACHE_DIR="+dir)
	}
	if c.Remote != "" {
		env = append(env, "CCACHE_REMOTE_STORAGE="+c.Remote)
	}
	if c.MaxSize != "" {
		env = append(env, "CCACHE_MAXSIZE="+c.MaxSize)
	}
	return env
}

// CcacheCounts are ccache's counters as `ccache --print-stats` reports them.
type CcacheCounts struct {
	// Hits are direct and preprocessed hits, local or remote.
	Hits int64
	// Misses are compiles that ran the compiler.
	Misses int64
	// RemoteHits came from the remote storage.
	RemoteHits int64
	// Uncacheable are calls ccache passed through (links, -E, ...).
	Uncacheable int64
	// Raw holds every counter by its name.
	Raw map[string]int64
}

// HitRate is Hits / (Hits + Misses), 0 when nothing was compiled.
func (c CcacheCounts) HitRate() float64 {
	if c.Hits+c.Misses == 0 {
		return 0
	}
	return float64(c.Hits) / float64(c.Hits+c.Misses)
}

// ParseCcacheStats reads `ccache --print-stats` output: one
// "name<TAB>value" line per counter.
func ParseCcacheStats(out []byte) (CcacheCounts, error) {
	c := CcacheCounts{Raw: map[string]int64{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		name, val, ok := strings.Cut(text, "\t")
		if !ok {
			return c, fmt.Errorf("ccache stats line %d: %q is not NAME<TAB>VALUE", line, text)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return c, fmt.Errorf("ccache stats line %d: counter %s: %w", line, name, err)
		}
		c.Raw[name] = n
	}
	if _, ok := c.Raw["cache_miss"]; !ok {
		return c, fmt.Errorf("ccache stats: no cache_miss counter (ccache older than 4.x?)")
	}
	c.Hits = c.Raw["direct_cache_hit"] + c.Raw["preprocessed_cache_hit"]
	c.Misses = c.Raw["cache_miss"]
	c.RemoteHits = c.Raw["remote_storage_hit"]
	for _, k := range []string{"called_for_link", "called_for_preprocessing", "no_input_file", "multiple_source_files", "unsupported_compiler_option", "unsupported_source_language", "autoconf_test"} {
		c.Uncacheable += c.Raw[k]
	}
	return c, nil
}

// Stats runs `ccache --print-stats` against the configured cache (Dir, or
// ccache's default).
func (c CcacheConfig) Stats(ctx context.Context) (CcacheCounts, error) {
	out, err := c.run(ctx, "--print-stats")
	if err != nil {
		return CcacheCounts{}, err
	}
	return ParseCcacheStats(out)
}

// ZeroStats resets the counters (not the cached objects), so that the
// next Stats covers one build.
func (c CcacheConfig) ZeroStats(ctx context.Context) error {
	_, err := c.run(ctx, "--zero-stats")
	return err
}

func (c CcacheConfig) run(ctx context.Context, args ...string) ([]byte, error) {
	exe := c.Inner()[0]
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(cmd.Environ(), c.Env("/")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", exe, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
