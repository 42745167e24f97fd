package toolchain

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tritonbuild/tritonbuild/internal/atomicfile"
)

// Kind sorts commands by how much memory they tend to need.
type Kind string

const (
	KindCompile Kind = "compile"
	KindLink    Kind = "link"
	// KindOther is any command that is neither (e.g. "cc --version"); it runs
	// without asking the broker.
	KindOther Kind = "other"
)

// CommandID names a compiler invocation for the learned profile.
type CommandID struct {
	Kind Kind `json:"kind"`
	// Key is the source file of a compile or the output of a link, as the
	// command line spells it (the broker makes it absolute and trims the
	// build's roots so that it is stable across build directories).
	Key string `json:"key"`
}

// sourceExts are the suffixes that mark a compiler input as a translation
// unit rather than an object, library or flag value.
var sourceExts = []string{".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".cp", ".m", ".mm", ".S", ".s", ".sx", ".cu", ".i", ".ii"}

// flagsWithValue take the next argument as their value; that argument is
// never the source file.
var flagsWithValue = map[string]bool{
	"-o": true, "-MF": true, "-MT": true, "-MQ": true, "-include": true, "-imacros": true,
	"-I": true, "-isystem": true, "-iquote": true, "-idirafter": true, "-D": true, "-U": true,
	"-x": true, "-Xclang": true, "-Xlinker": true, "-Xassembler": true, "-Xpreprocessor": true,
	"-arch": true, "-target": true, "--param": true, "-L": true, "-l": true, "-T": true,
	"-u": true, "-z": true, "-isysroot": true, "--sysroot": true, "-main-file-name": true,
}

// ClassifyCommand tells a compile from a link by its arguments (args[0] is
// the compiler) and names its source file or output. A compile carries -c,
// -S or -E; anything else that writes an -o output is a link.
func ClassifyCommand(args []string) CommandID {
	if len(args) == 0 {
		return CommandID{Kind: KindOther}
	}
	compile := false
	var source, output string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "-S" || a == "-E":
			compile = true
		case flagsWithValue[a]:
			if a == "-o" && i+1 < len(args) {
				output = args[i+1]
			}
			i++
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			output = a[2:]
		case strings.HasPrefix(a, "-"):
		default:
			for _, ext := range sourceExts {
				if strings.HasSuffix(a, ext) {
					source = a
					break
				}
			}
		}
	}
	switch {
	case compile && source != "":
		return CommandID{Kind: KindCompile, Key: source}
	case compile:
		return CommandID{Kind: KindCompile, Key: output}
	case output != "":
		return CommandID{Kind: KindLink, Key: output}
	}
	return CommandID{Kind: KindOther}
}

// Sample is one finished run of a command.
type Sample struct {
	PeakRSS int64 `json:"peak_rss"`
	WallMS  int64 `json:"wall_ms"`
}

// CommandStats holds the recent runs of one command.
type CommandStats struct {
	Kind    Kind     `json:"kind"`
	Samples []Sample `json:"samples"`
}

// maxSamples bounds the history per command: recent builds matter, and the
// file stays small for LLVM's ~5000 commands.
const maxSamples = 8

// Stats is the learned memory profile of one recipe version: the peak RSS
// and wall time of each compile and link, recorded by the launcher through
// the broker. It is safe for concurrent use.
type Stats struct {
	mu       sync.Mutex
	recipe   string
	version  string
	commands map[string]*CommandStats
	oomKills int64
	// kindP95 caches per-kind percentiles; nil entries are recomputed.
	kindP95 map[Kind]int64
}

// statsFile is the on-disk form of Stats.
type statsFile struct {
	Format   int                      `json:"format"`
	Recipe   string                   `json:"recipe"`
	Version  string                   `json:"version"`
	Updated  time.Time                `json:"updated"`
	OOMKills int64                    `json:"oom_kills,omitempty"`
	Commands map[string]*CommandStats `json:"commands"`
}

const statsFormat = 1

// NewStats returns empty stats for a recipe version.
func NewStats(recipe, version string) *Stats {
	return &Stats{recipe: recipe, version: version, commands: map[string]*CommandStats{}}
}

// LoadStats reads the stats file at path. A missing file, or one written for
// another recipe version, yields empty stats: figures from another version
// would mislead as much as they help.
func LoadStats(path, recipe, version string) (*Stats, error) {
	s := NewStats(recipe, version)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading build stats: %w", err)
	}
	var f statsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parsing build stats %s: %w", path, err)
	}
	if f.Format != statsFormat {
		return nil, fmt.Errorf("build stats %s: format %d, want %d", path, f.Format, statsFormat)
	}
	if f.Recipe != recipe || f.Version != version {
		return s, nil
	}
	for k, c := range f.Commands {
		if c == nil || (c.Kind != KindCompile && c.Kind != KindLink) {
			return nil, fmt.Errorf("build stats %s: command %q: bad kind", path, k)
		}
		s.commands[k] = c
	}
	s.oomKills = f.OOMKills
	return s, nil
}

// Save writes the stats to path atomically (temporary file, fsync, rename),
// so a crash leaves the old file or the new one, never half of either.
func (s *Stats) Save(path string) error {
	s.mu.Lock()
	f := statsFile{Format: statsFormat, Recipe: s.recipe, Version: s.version, Updated: time.Now().UTC(),
		OOMKills: s.oomKills, Commands: s.commands}
	data, err := json.MarshalIndent(f, "", " ")
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding build stats: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// StatsFile names the stats file of a recipe version inside dir, keeping
// the name to characters that are safe in any file system.
func StatsFile(dir, recipe, version string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '+' {
				return r
			}
			return '-'
		}, s)
	}
	return filepath.Join(dir, clean(recipe)+"@"+clean(version)+".json")
}

func statsKey(id CommandID) string { return string(id.Kind) + ":" + id.Key }

// Record adds one finished run. Runs that were OOM-killed are counted but
// their peak is not kept: the kernel stopped them before their real peak.
func (s *Stats) Record(id CommandID, sample Sample, oomKilled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if oomKilled {
		s.oomKills++
		return
	}
	if id.Kind != KindCompile && id.Kind != KindLink {
		return
	}
	k := statsKey(id)
	c := s.commands[k]
	if c == nil {
		c = &CommandStats{Kind: id.Kind}
		s.commands[k] = c
	}
	c.Samples = append(c.Samples, sample)
	if len(c.Samples) > maxSamples {
		c.Samples = slices.Delete(c.Samples, 0, len(c.Samples)-maxSamples)
	}
	s.kindP95 = nil
}

// OOMKills is the number of OOM-killed runs recorded (over all builds kept
// in the file).
func (s *Stats) OOMKills() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oomKills
}

// Len is the number of commands with history.
func (s *Stats) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.commands)
}

// p95 returns the nearest-rank 95th percentile of vals (sorted in place).
func p95(vals []int64) int64 {
	if len(vals) == 0 {
		return 0
	}
	slices.Sort(vals)
	rank := (95*len(vals) + 99) / 100 // ceil(0.95 n), 1-based
	return vals[rank-1]
}

// CommandP95 returns the p95 peak RSS of one command's recorded runs.
func (s *Stats) CommandP95(id CommandID) (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.commands[statsKey(id)]
	if c == nil {
		return 0, 0
	}
	vals := make([]int64, len(c.Samples))
	for i, sm := range c.Samples {
		vals[i] = sm.PeakRSS
	}
	return p95(vals), len(vals)
}

// KindP95 returns the p95 over all commands of a kind, taking each command's
// own p95 so that often-rebuilt files do not outweigh the rest.
func (s *Stats) KindP95(kind Kind) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.kindP95[kind]; ok {
		return v
	}
	var vals []int64
	for _, c := range s.commands {
		if c.Kind != kind || len(c.Samples) == 0 {
			continue
		}
		own := make([]int64, len(c.Samples))
		for i, sm := range c.Samples {
			own[i] = sm.PeakRSS
		}
		vals = append(vals, p95(own))
	}
	v := p95(vals)
	if s.kindP95 == nil {
		s.kindP95 = map[Kind]int64{}
	}
	s.kindP95[kind] = v
	return v
}

// Profile is the learned per-kind p95; fields are 0 where nothing was
// recorded.
func (s *Stats) Profile() Profile {
	return Profile{CompileBytes: s.KindP95(KindCompile), LinkBytes: s.KindP95(KindLink)}
}
