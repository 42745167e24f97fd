package toolchain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTools returns the programs a source build needs, probed by Probe
// when ProbeOptions.Tools is nil.
func DefaultTools() []string {
	return []string{"cc", "c++", "cmake", "ninja", "make", "git", "python3", "patch", "xz"}
}

// ProbeOptions says what Probe looks at.
type ProbeOptions struct {
	// Root is prepended to /proc and /sys paths; "" means the live system.
	// Tests point it at a fixture tree.
	Root string
	// Dirs are directories whose file system's free space is reported
	// (build, store, source cache). Missing directories are measured at their
	// nearest existing parent, since the build creates them.
	Dirs []string
	// Tools to find on PATH and ask for a version; nil means DefaultTools,
	// an empty non-nil slice means none.
	Tools []string
	// PATH to search; "" means the process's PATH.
	PATH string
}

// Host is what Probe found. It is JSON-serialisable for the doctor report.
type Host struct {
	CPU    CPUInfo    `json:"cpu"`
	Memory MemoryInfo `json:"memory"`
	Disks  []DiskInfo `json:"disks,omitempty"`
	Tools  []ToolInfo `json:"tools,omitempty"`
}

// CPUInfo is the CPUs the process may actually keep busy.
type CPUInfo struct {
	// Online counts CPUs the kernel runs (runtime.NumCPU on the live system).
	Online int `json:"online"`
	// Affinity counts CPUs in the process's affinity mask (Cpus_allowed_list).
	Affinity int `json:"affinity"`
	// Quota is the cgroup CPU bandwidth limit in CPUs; 0 means none.
	Quota float64 `json:"quota,omitempty"`
	// Usable is min(Affinity, ceil(Quota)), at least 1.
	Usable int `json:"usable"`
	// Reason names what bounds Usable.
	Reason string `json:"reason"`
}

// MemoryInfo is the memory the process may use before something kills it.
type MemoryInfo struct {
	// Total is MemTotal from /proc/meminfo.
	Total int64 `json:"total"`
	// Available is MemAvailable from /proc/meminfo.
	Available int64 `json:"available"`
	// Cgroup is the memory cgroup, when the memory controller is enabled.
	Cgroup *Cgroup `json:"cgroup,omitempty"`
	// CgroupLimit is the binding limit of that group's ancestry (0 = none).
	CgroupLimit MemoryLimit `json:"cgroup_limit"`
	// Usable is min(Available, CgroupLimit.Available when limited).
	Usable int64 `json:"usable"`
	// Reason names what bounds Usable.
	Reason string `json:"reason"`
}

// DiskInfo is the free space of the file system holding Path.
type DiskInfo struct {
	Path string `json:"path"`
	// Measured is the existing directory that was statted.
	Measured string `json:"measured"`
	Free     int64  `json:"free"`
	Total    int64  `json:"total"`
}

// ToolInfo is one program found (or not) on PATH.
type ToolInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	// Banner is the first line the tool printed for --version.
	Banner string `json:"banner,omitempty"`
	Found  bool   `json:"found"`
	Error  string `json:"error,omitempty"`
}

// Tool returns the probed tool named name, or nil.
func (h *Host) Tool(name string) *ToolInfo {
	for i := range h.Tools {
		if h.Tools[i].Name == name {
			return &h.Tools[i]
		}
	}
	return nil
}

// Probe inspects the host: usable CPUs, usable memory, free disk at the
// given directories and the versions of the build tools.
func Probe(ctx context.Context, opts ProbeOptions) (*Host, error) {
	h := &Host{}
	var err error
	if h.CPU, err = probeCPU(opts.Root); err != nil {
		return nil, fmt.Errorf("probing CPUs: %w", err)
	}
	if h.Memory, err = probeMemory(opts.Root); err != nil {
		return nil, fmt.Errorf("probing memory: %w", err)
	}
	for _, d := range opts.Dirs {
		di, err := probeDisk(d)
		if err != nil {
			return nil, fmt.Errorf("probing free disk at %q: %w", d, err)
		}
		h.Disks = append(h.Disks, di)
	}
	tools := opts.Tools
	if tools == nil {
		tools = DefaultTools()
	}
	for _, t := range tools {
		h.Tools = append(h.Tools, probeTool(ctx, t, opts.PATH))
	}
	return h, nil
}

func probeCPU(root string) (CPUInfo, error) {
	var ci CPUInfo
	live := rootDir(root) == "/"
	if data, err := os.ReadFile(filepath.Join(rootDir(root), "sys/devices/system/cpu/online")); err == nil {
		n, err := countCPUList(strings.TrimSpace(string(data)))
		if err != nil {
			return ci, fmt.Errorf("sys/devices/system/cpu/online: %w", err)
		}
		ci.Online = n
	} else if live {
		ci.Online = runtime.NumCPU()
	}
	status := filepath.Join(rootDir(root), "proc/self/status")
	if data, err := os.ReadFile(status); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				n, err := countCPUList(strings.TrimSpace(v))
				if err != nil {
					return ci, fmt.Errorf("%s: Cpus_allowed_list: %w", status, err)
				}
				ci.Affinity = n
			}
		}
	}
	if ci.Affinity == 0 && live {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err == nil {
			ci.Affinity = set.Count()
		}
	}
	if ci.Affinity == 0 {
		ci.Affinity = ci.Online
	}
	if ci.Online == 0 {
		ci.Online = ci.Affinity
	}
	if ci.Affinity == 0 {
		return ci, errors.New("no CPU count found (no Cpus_allowed_list, no sys/devices/system/cpu/online)")
	}
	ci.Usable, ci.Reason = ci.Affinity, fmt.Sprintf("%d CPUs in the affinity mask", ci.Affinity)
	cg, err := FindCgroup(root, "cpu")
	if err != nil {
		return ci, err
	}
	if cg != nil {
		q, err := cg.CPUQuota()
		if err != nil {
			return ci, err
		}
		ci.Quota = q
		if q > 0 {
			if n := max(int(math.Ceil(q-1e-9)), 1); n < ci.Usable {
				ci.Usable = n
				ci.Reason = fmt.Sprintf("cgroup v%d CPU quota %.2g CPUs", cg.Version, q)
			}
		}
	}
	return ci, nil
}

// countCPUList counts the CPUs in a kernel list such as "0-3,8,10-11".
func countCPUList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("bad CPU list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

func probeMemory(root string) (MemoryInfo, error) {
	var mi MemoryInfo
	meminfo := filepath.Join(rootDir(root), "proc/meminfo")
	kv, err := readKeyedFile(meminfo)
	if err != nil {
		return mi, fmt.Errorf("reading meminfo: %w", err)
	}
	var ok bool
	if mi.Total, ok = kv["MemTotal"]; !ok {
		return mi, fmt.Errorf("%s: no MemTotal", meminfo)
	}
	if mi.Available, ok = kv["MemAvailable"]; !ok {
		// Kernels before 3.14: free plus page cache is the usual estimate.
		mi.Available = kv["MemFree"] + kv["Cached"]
	}
	mi.Usable, mi.Reason = mi.Available, fmt.Sprintf("MemAvailable %s", FormatBytes(mi.Available))
	cg, err := FindCgroup(root, "memory")
	if err != nil {
		return mi, err
	}
	if cg == nil {
		return mi, nil
	}
	mi.Cgroup = cg
	if mi.CgroupLimit, err = cg.ReadMemoryLimit(); err != nil {
		return mi, err
	}
	if l := mi.CgroupLimit; l.Limit > 0 && l.Available < mi.Usable {
		mi.Usable = l.Available
		mi.Reason = fmt.Sprintf("cgroup v%d limit %s at %s, %s in use", cg.Version,
			FormatBytes(l.Limit), l.LimitDir, FormatBytes(l.Usage))
	}
	return mi, nil
}

func probeDisk(dir string) (DiskInfo, error) {
	di := DiskInfo{Path: dir}
	d, err := filepath.Abs(dir)
	if err != nil {
		return di, err
	}
	for {
		if _, err := os.Stat(d); err == nil {
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d, &st); err != nil {
		return di, fmt.Errorf("statfs %s: %w", d, err)
	}
	di.Measured = d
	di.Free = int64(st.Bavail) * int64(st.Bsize)
	di.Total = int64(st.Blocks) * int64(st.Bsize)
	return di, nil
}

var versionRE = regexp.MustCompile(`\d+\.\d+(\.\d+)*`)

// probeTool finds name on PATH and runs "name --version" (with a timeout, so
// a tool that waits for input cannot hang the probe).
func probeTool(ctx context.Context, name, pathEnv string) ToolInfo {
	ti := ToolInfo{Name: name}
	p, err := lookPath(name, pathEnv)
	if err != nil {
		ti.Error = err.Error()
		return ti
	}
	ti.Path, ti.Found = p, true
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if err != nil {
		ti.Error = fmt.Sprintf("%s --version: %v", p, err)
	}
	first, _, _ := strings.Cut(string(bytes.TrimSpace(out)), "\n")
	ti.Banner = strings.TrimSpace(first)
	ti.Version = versionRE.FindString(ti.Banner)
	return ti
}

func lookPath(name, pathEnv string) (string, error) {
	if pathEnv == "" {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH", name)
}

// FormatBytes renders n in binary units with one decimal ("21.3 GiB").
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, suffix := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		if math.Abs(v) < unit || suffix == "TiB" {
			return fmt.Sprintf("%.1f %s", v, suffix)
		}
	}
	return ""
}
