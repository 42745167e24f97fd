package toolchain

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// AptPackages returns the package list the report's install instructions
// give, plus ninja-build, which tritonbuild's CMake builds use.
func AptPackages() []string {
	return []string{
		"build-essential", "cmake", "curl", "git", "wget", "software-properties-common",
		"libssl-dev", "libbz2-dev", "libreadline-dev", "libsqlite3-dev", "libncurses5-dev",
		"libncursesw5-dev", "xz-utils", "tk-dev", "libffi-dev", "liblzma-dev", "libxml2-dev",
		"libxmlsec1-dev", "llvm", "ninja-build",
	}
}

// toolPackages maps each required tool to the Debian package providing it.
var toolPackages = map[string]string{
	"cc": "build-essential", "c++": "build-essential", "make": "build-essential",
	"cmake": "cmake", "ninja": "ninja-build", "git": "git", "python3": "python3",
	"patch": "patch", "xz": "xz-utils",
}

// NodeNeed is what one planned build node needs from the host.
type NodeNeed struct {
	Name string `json:"name"`
	// DiskBytes is the free space its source, build tree and install need
	// (LLVM with clang and MLIR: tens of GB).
	DiskBytes int64 `json:"disk_bytes"`
	// MemoryPerJob is one compile's peak memory and LinkPerJob one link's,
	// as the plan resolves them (learned, else declared, else defaults).
	MemoryPerJob int64 `json:"memory_per_job"`
	LinkPerJob   int64 `json:"link_per_job,omitempty"`
	// Dir is where it builds; "" means the first of DoctorOptions.Probe.Dirs.
	Dir string `json:"dir,omitempty"`
	// Packages are the distribution packages its build needs installed
	// (the recipe's host_packages).
	Packages []string `json:"packages,omitempty"`
}

// DoctorOptions configures Doctor.
type DoctorOptions struct {
	Probe ProbeOptions
	Nodes []NodeNeed
	// QueryPackages returns which of pkgs are installed; nil asks
	// dpkg-query (and skips the package check where there is none).
	QueryPackages func(ctx context.Context, pkgs []string) (map[string]bool, error)
	// Distcc, when set, adds per-host checks: reachable, and compiling
	// with the same compiler as Compiler ("" means cc) here.
	Distcc   *DistccConfig
	Compiler string
	// Reserve is build.yaml's jobs.reserve, as the plan uses it (0: the
	// default reserve).
	Reserve int64
}

// Check is one line of the doctor report.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Hard checks make the report fail; soft ones are warnings.
	Hard   bool   `json:"hard"`
	Detail string `json:"detail"`
}

// NodeCheck is the verdict for one planned node.
type NodeCheck struct {
	NodeNeed
	DiskFree int64   `json:"disk_free"`
	DiskOK   bool    `json:"disk_ok"`
	MemoryOK bool    `json:"memory_ok"`
	Plan     JobPlan `json:"plan"`
}

// Report is what Doctor found; it serialises to JSON for "doctor --json".
type Report struct {
	Host            *Host       `json:"host"`
	Checks          []Check     `json:"checks"`
	Nodes           []NodeCheck `json:"nodes,omitempty"`
	MissingTools    []string    `json:"missing_tools,omitempty"`
	MissingPackages []string    `json:"missing_packages,omitempty"`
	// AptGet installs everything the builds need, as the report gives it.
	AptGet string `json:"apt_get"`
	// AptGetMissing installs only what is missing ("" when nothing is).
	AptGetMissing string `json:"apt_get_missing,omitempty"`
}

// OK is false when a hard requirement is missing.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if c.Hard && !c.OK {
			return false
		}
	}
	return true
}

// Doctor probes the host and checks it against what the planned nodes
// need: the build tools, the packages, and for each node the free disk and
// the memory of one job.
func Doctor(ctx context.Context, opts DoctorOptions) (*Report, error) {
	po := opts.Probe
	if po.Tools == nil {
		po.Tools = DefaultTools()
	}
	dirs := append([]string(nil), po.Dirs...)
	for _, n := range opts.Nodes {
		if n.Dir != "" {
			dirs = append(dirs, n.Dir)
		}
	}
	po.Dirs = dirs
	h, err := Probe(ctx, po)
	if err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	pkgs := AptPackages()
	for _, n := range opts.Nodes {
		for _, p := range n.Packages {
			if !contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	r := &Report{Host: h, AptGet: "apt-get install -y " + strings.Join(pkgs, " ")}
	missingPkgs := map[string]bool{}
	for _, t := range h.Tools {
		c := Check{Name: "tool " + t.Name, OK: t.Found, Hard: true}
		if t.Found {
			c.Detail = fmt.Sprintf("%s %s", t.Path, t.Version)
		} else {
			pkg := toolPackages[t.Name]
			c.Detail = fmt.Sprintf("not found on PATH (package %s)", pkg)
			r.MissingTools = append(r.MissingTools, t.Name)
			if pkg != "" {
				missingPkgs[pkg] = true
			}
		}
		r.Checks = append(r.Checks, c)
	}

	query := opts.QueryPackages
	if query == nil {
		if _, err := exec.LookPath("dpkg-query"); err == nil {
			query = dpkgInstalled
		}
	}
	var installed map[string]bool
	if query != nil {
		var err error
		installed, err = query(ctx, pkgs)
		c := Check{Name: "packages", OK: true}
		if err != nil {
			c.OK, c.Detail = false, fmt.Sprintf("cannot tell which packages are installed: %v", err)
		} else {
			var miss []string
			for _, p := range pkgs {
				if !installed[p] {
					miss = append(miss, p)
					missingPkgs[p] = true
				}
			}
			if len(miss) > 0 {
				c.OK, c.Detail = false, "not installed: "+strings.Join(miss, " ")
			} else {
				c.Detail = fmt.Sprintf("all %d installed", len(pkgs))
			}
		}
		r.Checks = append(r.Checks, c)
	}
	for _, p := range append(pkgs, "python3", "patch") {
		if missingPkgs[p] && !contains(r.MissingPackages, p) {
			r.MissingPackages = append(r.MissingPackages, p)
		}
	}
	if len(r.MissingPackages) > 0 {
		r.AptGetMissing = "apt-get install -y " + strings.Join(r.MissingPackages, " ")
	}

	r.Checks = append(r.Checks, Check{Name: "cpus", OK: true, Detail: fmt.Sprintf("%d usable (%s)", h.CPU.Usable, h.CPU.Reason)},
		Check{Name: "memory", OK: h.Memory.Usable > 0, Hard: true, Detail: fmt.Sprintf("%s usable (%s)", FormatBytes(h.Memory.Usable), h.Memory.Reason)})

	for _, n := range opts.Nodes {
		nc := NodeCheck{NodeNeed: n}
		dir := n.Dir
		if dir == "" && len(opts.Probe.Dirs) > 0 {
			dir = opts.Probe.Dirs[0]
		}
		if d := diskFor(h, dir); d != nil {
			nc.DiskFree = d.Free
			nc.DiskOK = d.Free >= n.DiskBytes
		} else {
			nc.DiskOK = n.DiskBytes == 0
		}
		nc.Plan = PlanJobs(h, Profile{CompileBytes: n.MemoryPerJob, LinkBytes: n.LinkPerJob}, PlanOptions{Reserve: opts.Reserve})
		nc.MemoryOK = n.MemoryPerJob <= h.Memory.Usable
		r.Nodes = append(r.Nodes, nc)
		r.Checks = append(r.Checks,
			Check{Name: "disk for " + n.Name, OK: nc.DiskOK, Hard: true,
				Detail: fmt.Sprintf("needs %s at %s, %s free", FormatBytes(n.DiskBytes), dir, FormatBytes(nc.DiskFree))},
			Check{Name: "memory for " + n.Name, OK: nc.MemoryOK, Hard: true,
				Detail: fmt.Sprintf("needs %s per job, %s usable; %s", FormatBytes(n.MemoryPerJob), FormatBytes(h.Memory.Usable), nc.Plan.Reason)})
		if len(n.Packages) > 0 {
			r.Checks = append(r.Checks, nodePackagesCheck(n, installed))
		}
	}
	if opts.Distcc != nil {
		r.Checks = append(r.Checks, DistccChecks(ctx, *opts.Distcc, opts.Compiler)...)
	}
	return r, nil
}

// nodePackagesCheck is hard: a build without its libraries fails deep in
// its configure step. Without a package database it can only warn.
func nodePackagesCheck(n NodeNeed, installed map[string]bool) Check {
	c := Check{Name: "packages for " + n.Name, Hard: installed != nil}
	if installed == nil {
		c.Detail = "cannot tell whether these are installed: " + strings.Join(n.Packages, " ")
		return c
	}
	var miss []string
	for _, p := range n.Packages {
		if !installed[p] {
			miss = append(miss, p)
		}
	}
	if len(miss) > 0 {
		c.Detail = "not installed: " + strings.Join(miss, " ")
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("all %d installed", len(n.Packages))
	return c
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func diskFor(h *Host, dir string) *DiskInfo {
	for i := range h.Disks {
		if h.Disks[i].Path == dir {
			return &h.Disks[i]
		}
	}
	return nil
}

// MissingPackages returns which of pkgs the distribution's package
// database does not list as installed. asked is false when there is no
// dpkg to ask (not a Debian-family system): then nothing can be said.
func MissingPackages(ctx context.Context, pkgs []string) (missing []string, asked bool, err error) {
	if len(pkgs) == 0 {
		return nil, true, nil
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return nil, false, nil
	}
	installed, err := dpkgInstalled(ctx, pkgs)
	if err != nil {
		return nil, true, err
	}
	for _, p := range pkgs {
		if !installed[p] {
			missing = append(missing, p)
		}
	}
	return missing, true, nil
}

// dpkgInstalled asks dpkg which of pkgs are installed. dpkg-query exits 1
// when some are unknown and still lists the others, so its status is not
// an error by itself.
func dpkgInstalled(ctx context.Context, pkgs []string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f=${Package}\t${db:Status-Status}\n"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || !strings.Contains(stderr.String(), "no packages found") {
			return nil, fmt.Errorf("dpkg-query: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
	}
	return parseDpkgStatus(out), nil
}

func parseDpkgStatus(out []byte) map[string]bool {
	got := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, status, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, ":") // drop an architecture suffix
		if status == "installed" {
			got[name] = true
		}
	}
	return got
}

// EnvExports returns the shell lines that make an installed prefix usable:
// TRITON_SERVER_HOME, LLVM_PATH (when llvmPrefix is set), PATH and
// LD_LIBRARY_PATH. It edits no file; users append the output to their
// shell profile if they want it permanent.
func EnvExports(prefix string, llvmPrefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "export TRITON_SERVER_HOME=%s\n", shellQuote(prefix))
	bins := []string{filepath.Join(prefix, "bin")}
	libs := []string{filepath.Join(prefix, "lib")}
	if llvmPrefix != "" {
		fmt.Fprintf(&b, "export LLVM_PATH=%s\n", shellQuote(llvmPrefix))
		bins = append([]string{filepath.Join(llvmPrefix, "bin")}, bins...)
		libs = append([]string{filepath.Join(llvmPrefix, "lib")}, libs...)
	}
	quoteAll := func(ps []string) string {
		q := make([]string, len(ps))
		for i, p := range ps {
			q[i] = shellQuote(p)
		}
		return strings.Join(q, ":")
	}
	fmt.Fprintf(&b, "export PATH=%s:\"$PATH\"\n", quoteAll(bins))
	fmt.Fprintf(&b, "export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:\"$LD_LIBRARY_PATH\"}\n", quoteAll(libs))
	return b.String()
}
