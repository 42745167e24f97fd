package toolchain

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimitedThreshold is where a cgroup v1 limit stops meaning anything: the
// kernel reports "no limit" as a page-rounded PAGE_COUNTER_MAX
// (9223372036854771712 on 4 KiB pages), so anything at or above 2^62 is
// treated as no limit rather than compared against real memory.
const unlimitedThreshold = int64(1) << 62

// Cgroup locates one process's cgroup for one controller on disk.
type Cgroup struct {
	// Version is 1 (legacy per-controller hierarchies) or 2 (unified).
	Version int `json:"version"`
	// Path is the group's path inside its hierarchy, as /proc/<pid>/cgroup
	// names it (e.g. "/process_api/abc").
	Path string `json:"path"`
	// Dir is the group's directory on disk (already joined with the probe
	// root), e.g. "/sys/fs/cgroup/memory/process_api/abc".
	Dir string `json:"dir"`
	// Mount is the directory the hierarchy is mounted at (joined with the
	// root); walking up from Dir stops here.
	Mount string `json:"mount"`
}

// cgroupLine is one line of /proc/<pid>/cgroup.
type cgroupLine struct {
	id          string
	controllers []string
	path        string
}

// parseProcCgroup parses the "hierarchy-ID:controller-list:cgroup-path" lines
// of /proc/<pid>/cgroup.
func parseProcCgroup(data []byte, name string) ([]cgroupLine, error) {
	var out []cgroupLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s:%d: want id:controllers:path, got %q", name, n, line)
		}
		var ctrls []string
		if parts[1] != "" {
			ctrls = strings.Split(parts[1], ",")
		}
		out = append(out, cgroupLine{id: parts[0], controllers: ctrls, path: parts[2]})
	}
	return out, sc.Err()
}

// cgroupMount is one cgroup or cgroup2 entry of /proc/<pid>/mountinfo.
type cgroupMount struct {
	root       string // path inside the hierarchy that is mounted
	mountPoint string
	v2         bool
	options    []string // super options: controller names for v1
}

// parseMountinfo returns the cgroup mounts listed in /proc/<pid>/mountinfo.
// The format is "id parent maj:min root mountpoint opts [optional...] - fstype source superopts".
func parseMountinfo(data []byte, name string) ([]cgroupMount, error) {
	var out []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 6 || sep+3 > len(fields) {
			return nil, fmt.Errorf("%s:%d: malformed mountinfo line %q", name, n, sc.Text())
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, cgroupMount{
			root:       unescapeMount(fields[3]),
			mountPoint: unescapeMount(fields[4]),
			v2:         fstype == "cgroup2",
			options:    strings.Split(fields[sep+3], ","),
		})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space) that mountinfo uses.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FindCgroup locates the cgroup of the calling process for controller
// ("memory" or "cpu") under root ("" or "/" for the live system; a fixture
// directory in tests). It prefers a v1 hierarchy that carries the controller
// and falls back to the unified (v2) hierarchy. It returns (nil, nil) when the
// controller is in no hierarchy, e.g. v2 without the controller enabled.
func FindCgroup(root, controller string) (*Cgroup, error) {
	return findCgroup(root, "self", controller)
}

func findCgroup(root, pid, controller string) (*Cgroup, error) {
	procCgroup := filepath.Join(rootDir(root), "proc", pid, "cgroup")
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return nil, fmt.Errorf("reading cgroup membership: %w", err)
	}
	lines, err := parseProcCgroup(data, procCgroup)
	if err != nil {
		return nil, err
	}
	mountinfo := filepath.Join(rootDir(root), "proc", pid, "mountinfo")
	var mounts []cgroupMount
	if mi, err := os.ReadFile(mountinfo); err == nil {
		if mounts, err = parseMountinfo(mi, mountinfo); err != nil {
			return nil, err
		}
	}
	// v1 first: on hybrid hosts the unified hierarchy exists but carries no
	// controllers, so a v1 line naming the controller is the one that binds.
	for _, l := range lines {
		for _, c := range l.controllers {
			if c != controller {
				continue
			}
			m := findMount(mounts, false, l.controllers)
			if m == nil {
				// No mountinfo (minimal fixtures, odd containers): use the
				// conventional mount point.
				m = &cgroupMount{root: "/", mountPoint: path.Join("/sys/fs/cgroup", strings.Join(l.controllers, ","))}
				if _, err := os.Stat(filepath.Join(rootDir(root), m.mountPoint)); err != nil {
					m.mountPoint = path.Join("/sys/fs/cgroup", controller)
				}
			}
			return m.cgroup(root, 1, l.path), nil
		}
	}
	for _, l := range lines {
		if l.id != "0" || len(l.controllers) != 0 {
			continue
		}
		m := findMount(mounts, true, nil)
		if m == nil {
			m = &cgroupMount{root: "/", mountPoint: "/sys/fs/cgroup", v2: true}
		}
		cg := m.cgroup(root, 2, l.path)
		// The unified hierarchy only has the controller if its files exist in
		// our group or, for the root group, at the mount.
		ctrls, err := os.ReadFile(filepath.Join(cg.Dir, "cgroup.controllers"))
		if err != nil {
			ctrls, err = os.ReadFile(filepath.Join(cg.Mount, "cgroup.controllers"))
		}
		if err != nil || !containsField(string(ctrls), controller) {
			return nil, nil
		}
		return cg, nil
	}
	return nil, nil
}

func containsField(s, want string) bool {
	for _, f := range strings.Fields(s) {
		if f == want {
			return true
		}
	}
	return false
}

func findMount(mounts []cgroupMount, v2 bool, controllers []string) *cgroupMount {
	for i := range mounts {
		m := &mounts[i]
		if m.v2 != v2 {
			continue
		}
		if v2 {
			return m
		}
		ok := true
		for _, c := range controllers {
			found := false
			for _, o := range m.options {
				if o == c {
					found = true
				}
			}
			if !found {
				ok = false
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

func (m *cgroupMount) cgroup(root string, version int, cgPath string) *Cgroup {
	// Inside a container the mount often exposes only a subtree: its root
	// field names that subtree, and the membership path must be made
	// relative to it.
	rel := cgPath
	if m.root != "/" && (rel == m.root || strings.HasPrefix(rel, m.root+"/")) {
		rel = strings.TrimPrefix(rel, m.root)
	}
	mount := filepath.Join(rootDir(root), m.mountPoint)
	return &Cgroup{Version: version, Path: cgPath, Dir: filepath.Join(mount, rel), Mount: mount}
}

func rootDir(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

// ancestors returns Dir and each parent up to and including Mount.
func (c *Cgroup) ancestors() []string {
	var dirs []string
	d := filepath.Clean(c.Dir)
	mount := filepath.Clean(c.Mount)
	for {
		dirs = append(dirs, d)
		if d == mount || !strings.HasPrefix(d, mount+string(filepath.Separator)) {
			return dirs
		}
		d = filepath.Dir(d)
	}
}

// MemoryLimit describes the memory a cgroup lets its members use.
type MemoryLimit struct {
	// Limit is the tightest limit in the group and its ancestors (bytes);
	// 0 means none.
	Limit int64 `json:"limit"`
	// LimitDir is the group that sets Limit.
	LimitDir string `json:"limit_dir,omitempty"`
	// Usage is that group's working set: charged memory minus inactive file
	// cache, which the kernel reclaims before it OOM-kills anything.
	Usage int64 `json:"usage"`
	// Available is the smallest Limit-Usage over the group and its
	// ancestors; 0 when no ancestor has a limit.
	Available int64 `json:"available"`
}

// ReadMemoryLimit walks from the group up to its hierarchy's mount and
// returns the binding limit and what is left under it. v1 groups use
// memory.limit_in_bytes and memory.usage_in_bytes, v2 groups memory.max
// ("max" = none) and memory.current.
func (c *Cgroup) ReadMemoryLimit() (MemoryLimit, error) {
	var ml MemoryLimit
	limitFile, usageFile, inactiveKey := "memory.max", "memory.current", "inactive_file"
	if c.Version == 1 {
		limitFile, usageFile, inactiveKey = "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
	}
	found := false
	for _, d := range c.ancestors() {
		limit, err := readLimitFile(filepath.Join(d, limitFile))
		if errors.Is(err, os.ErrNotExist) {
			continue // the v2 root group has no memory.max
		}
		if err != nil {
			return ml, err
		}
		if limit == 0 {
			continue
		}
		usage, err := readIntFile(filepath.Join(d, usageFile))
		if err != nil {
			return ml, err
		}
		if st, err := readKeyedFile(filepath.Join(d, "memory.stat")); err == nil {
			if in, ok := st[inactiveKey]; ok && in <= usage {
				usage -= in
			}
		}
		avail := max(limit-usage, 0)
		if !found || avail < ml.Available {
			ml.Available = avail
		}
		if !found || limit < ml.Limit {
			ml.Limit, ml.LimitDir, ml.Usage = limit, d, usage
		}
		found = true
	}
	return ml, nil
}

// OOMKills returns the cgroup's oom_kill counter: the "oom_kill" line of
// memory.oom_control (v1, kernel 4.13+) or memory.events (v2). It counts
// processes the kernel killed because this group hit its limit.
func (c *Cgroup) OOMKills() (int64, error) {
	file := "memory.events"
	if c.Version == 1 {
		file = "memory.oom_control"
	}
	kv, err := readKeyedFile(filepath.Join(c.Dir, file))
	if err != nil {
		return 0, err
	}
	n, ok := kv["oom_kill"]
	if !ok {
		return 0, fmt.Errorf("%s: no oom_kill line (kernel too old?)", filepath.Join(c.Dir, file))
	}
	return n, nil
}

// CPUQuota returns the tightest CPU bandwidth limit over the group and its
// ancestors, in CPUs (1.5 = one and a half CPUs); 0 means none. v1 reads
// cpu.cfs_quota_us / cpu.cfs_period_us (-1 = none), v2 cpu.max ("max 100000").
func (c *Cgroup) CPUQuota() (float64, error) {
	best := 0.0
	for _, d := range c.ancestors() {
		var q float64
		var err error
		if c.Version == 1 {
			q, err = readCFSQuota(d)
		} else {
			q, err = readCPUMax(filepath.Join(d, "cpu.max"))
		}
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if q > 0 && (best == 0 || q < best) {
			best = q
		}
	}
	return best, nil
}

func readCFSQuota(dir string) (float64, error) {
	quota, err := readIntFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, err
	}
	if quota <= 0 {
		return 0, nil
	}
	period, err := readIntFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	if period <= 0 {
		return 0, fmt.Errorf("%s: period %d is not positive", filepath.Join(dir, "cpu.cfs_period_us"), period)
	}
	return float64(quota) / float64(period), nil
}

func readCPUMax(file string) (float64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) == 0 || len(f) > 2 {
		return 0, fmt.Errorf("%s: want \"quota period\", got %q", file, strings.TrimSpace(string(data)))
	}
	if f[0] == "max" {
		return 0, nil
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: quota: %w", file, err)
	}
	period := int64(100000)
	if len(f) == 2 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period <= 0 {
			return 0, fmt.Errorf("%s: bad period %q", file, f[1])
		}
	}
	return float64(quota) / float64(period), nil
}

// readLimitFile reads a memory limit; "max" and v1's huge "no limit" value
// both return 0.
func readLimitFile(file string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Values above MaxInt64 cannot be limits either.
		if u, uerr := strconv.ParseUint(s, 10, 64); uerr == nil && u > math.MaxInt64 {
			return 0, nil
		}
		return 0, fmt.Errorf("%s: not a byte count: %q", file, s)
	}
	if v < 0 || v >= unlimitedThreshold {
		return 0, nil
	}
	return v, nil
}

func readIntFile(file string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not an integer: %q", file, s)
	}
	return v, nil
}

// readKeyedFile parses "key value" lines (memory.stat, memory.events,
// memory.oom_control, /proc/meminfo with its "kB" suffix dropped).
func readKeyedFile(file string) (map[string]int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return parseKeyed(data, file)
}

func parseKeyed(data []byte, name string) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(strings.Replace(sc.Text(), ":", " ", 1))
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%s:%d: want \"key value\", got %q", name, n, sc.Text())
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: not an integer: %q", name, n, f[0], f[1])
		}
		if len(f) >= 3 && f[2] == "kB" {
			v *= 1024
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}
