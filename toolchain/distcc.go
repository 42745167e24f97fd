package toolchain

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DistccConfig sends compile jobs to distccd hosts. The local machine then
// only preprocesses (distcc's plain mode), so the memory broker grants a
// remote compile a small figure and -j may exceed the local CPUs by the
// hosts' slots; links always run locally under the broker.
type DistccConfig struct {
	// Exe is the distcc client; "" means "distcc" on PATH.
	Exe string
	// Hosts are distcc host specs: "HOST[:PORT][/LIMIT]", e.g.
	// "build3:3632/8". LIMIT is how many jobs the host takes at once
	// (distcc's default is 4).
	Hosts []string
	// Fallback lets distcc compile locally when no host answers. Off by
	// default: a silent local fallback would run full-size compiles under
	// remote-sized memory grants.
	Fallback bool
}

// DefaultDistccLimit is distcc's own per-host job limit when a host spec
// names none.
const DefaultDistccLimit = 4

// DistccHost is one parsed host spec.
type DistccHost struct {
	Host  string
	Port  int
	Limit int
}

// Addr is HOST:PORT for dialling.
func (h DistccHost) Addr() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// Spec is the host in DISTCC_HOSTS syntax.
func (h DistccHost) Spec() string {
	host := h.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d/%d", host, h.Port, h.Limit)
}

// ParseDistccHost reads "HOST[:PORT][/LIMIT]". Options distcc also knows
// (",lzo", "@ssh") are refused: tritonbuild talks plain TCP to distccd.
func ParseDistccHost(spec string) (DistccHost, error) {
	h := DistccHost{Port: 3632, Limit: DefaultDistccLimit}
	s := strings.TrimSpace(spec)
	if s == "" || strings.ContainsAny(s, ",@ \t") || s == "localhost" {
		return h, fmt.Errorf("distcc host %q: want HOST[:PORT][/LIMIT] (plain TCP, no options; localhost compiles would not be remote)", spec)
	}
	if rest, lim, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.Atoi(lim)
		if err != nil || n < 1 {
			return h, fmt.Errorf("distcc host %q: limit %q is not a positive number", spec, lim)
		}
		h.Limit, s = n, rest
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return h, fmt.Errorf("distcc host %q: unclosed [", spec)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return h, fmt.Errorf("distcc host %q: port %q is not a TCP port", spec, port)
		}
		h.Port = p
	}
	if host == "" {
		return h, fmt.Errorf("distcc host %q: no host name", spec)
	}
	h.Host = host
	return h, nil
}

// ParseHosts parses every host spec.
func (d DistccConfig) ParseHosts() ([]DistccHost, error) {
	if len(d.Hosts) == 0 {
		return nil, fmt.Errorf("distcc: no hosts configured")
	}
	out := make([]DistccHost, 0, len(d.Hosts))
	for i, s := range d.Hosts {
		h, err := ParseDistccHost(s)
		if err != nil {
			return nil, fmt.Errorf("distribute.distcc.hosts[%d]: %w", i, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// Slots is the number of compiles the hosts take at once.
func (d DistccConfig) Slots() int {
	hosts, err := d.ParseHosts()
	if err != nil {
		return 0
	}
	n := 0
	for _, h := range hosts {
		n += h.Limit
	}
	return n
}

// Inner returns the launcher words for Launcher.CMakeArgs(inner...).
func (d DistccConfig) Inner() []string {
	if d.Exe != "" {
		return []string{d.Exe}
	}
	return []string{"distcc"}
}

// Env returns DISTCC_HOSTS (normalised specs) and the fallback setting.
func (d DistccConfig) Env() []string {
	hosts, _ := d.ParseHosts()
	specs := make([]string, len(hosts))
	for i, h := range hosts {
		specs[i] = h.Spec()
	}
	fallback := "0"
	if d.Fallback {
		fallback = "1"
	}
	return []string{"DISTCC_HOSTS=" + strings.Join(specs, " "), "DISTCC_FALLBACK=" + fallback}
}

// AdjustJobs raises the compile job count by the remote slots; link jobs
// stay as planned, since links run here.
func (d DistccConfig) AdjustJobs(jp JobPlan) JobPlan {
	slots := d.Slots()
	if slots == 0 {
		return jp
	}
	jp.Jobs += slots
	jp.Reason += fmt.Sprintf("; +%d remote distcc slots on %d host(s) = %d", slots, len(d.Hosts), jp.Jobs)
	return jp
}

// CompileChain combines the optional ccache and distcc into the inner
// launcher words and environment for one build under workDir. With both,
// ccache runs first and calls distcc on a miss (CCACHE_PREFIX), so a hit
// never leaves the machine.
func CompileChain(cc *CcacheConfig, dc *DistccConfig, workDir string) (inner, env []string) {
	switch {
	case cc != nil && dc != nil:
		inner = cc.Inner()
		env = append(cc.Env(workDir), "CCACHE_PREFIX="+dc.Inner()[0])
		env = append(env, dc.Env()...)
	case cc != nil:
		inner, env = cc.Inner(), cc.Env(workDir)
	case dc != nil:
		inner, env = dc.Inner(), dc.Env()
	}
	return inner, env
}

// sendsRemote tells whether a compile command goes to distcc hosts: distcc
// is the command, or ccache is and calls distcc on a miss, and hosts are
// set. The broker then grants only the preprocessing's memory.
func sendsRemote(args, env []string) bool {
	if len(args) == 0 || envLookup(env, "DISTCC_HOSTS") == "" {
		return false
	}
	switch filepath.Base(args[0]) {
	case "distcc":
		return true
	case "ccache":
		return filepath.Base(envLookup(env, "CCACHE_PREFIX")) == "distcc"
	}
	return false
}

// DistccChecks are the doctor's checks of each host: reachable over TCP,
// and compiling with the same compiler as the local one. distccd runs no
// arbitrary commands, so the compiler is compared through its output: a
// probe file holding __VERSION__ is compiled remotely (no fallback) and
// locally, and the objects must be identical; when they are not, the
// version strings read back from both objects say what differs.
func DistccChecks(ctx context.Context, d DistccConfig, compiler string) []Check {
	hosts, err := d.ParseHosts()
	if err != nil {
		return []Check{{Name: "distcc hosts", Hard: true, Detail: err.Error()}}
	}
	if compiler == "" {
		compiler = "cc"
	}
	exe := d.Inner()[0]
	if _, err := exec.LookPath(exe); err != nil {
		return []Check{{Name: "distcc client", Hard: true, Detail: fmt.Sprintf("%s not found on PATH (package distcc): %v", exe, err)}}
	}
	dir, err := os.MkdirTemp("", "tbdistcc")
	if err != nil {
		return []Check{{Name: "distcc probe", Hard: true, Detail: err.Error()}}
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "probe.c")
	probe := "const char tritonbuild_probe[] = \"" + probeMarker + "\" __VERSION__ \"" + probeEnd + "\";\n"
	if err := os.WriteFile(src, []byte(probe), 0o644); err != nil {
		return []Check{{Name: "distcc probe", Hard: true, Detail: err.Error()}}
	}
	local := filepath.Join(dir, "local.o")
	var checks []Check
	if out, err := runIn(ctx, dir, nil, compiler, "-O2", "-c", src, "-o", local); err != nil {
		return []Check{{Name: "distcc local probe", Hard: true, Detail: fmt.Sprintf("%s cannot compile the probe: %v: %s", compiler, err, out)}}
	}
	localObj, _ := os.ReadFile(local)
	for _, h := range hosts {
		checks = append(checks, checkDistccHost(ctx, exe, compiler, dir, src, h, localObj)...)
	}
	return checks
}

const (
	probeMarker = "TRITONBUILD-CC<"
	probeEnd    = ">"
)

func checkDistccHost(ctx context.Context, exe, compiler, dir, src string, h DistccHost, localObj []byte) []Check {
	name := "distcc host " + h.Spec()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", h.Addr())
	cancel()
	if err != nil {
		return []Check{{Name: name + " reachable", Hard: true, Detail: fmt.Sprintf("no distccd at %s: %v", h.Addr(), err)}}
	}
	conn.Close()
	checks := []Check{{Name: name + " reachable", OK: true, Hard: true, Detail: "distccd answers at " + h.Addr()}}
	obj := filepath.Join(dir, "remote-"+strconv.Itoa(h.Port)+".o")
	env := []string{"DISTCC_HOSTS=" + h.Spec(), "DISTCC_FALLBACK=0", "DISTCC_SKIP_LOCAL_RETRY=1"}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	out, err := runIn(cctx, dir, env, exe, compiler, "-O2", "-c", src, "-o", obj)
	cancel()
	c := Check{Name: name + " compiler", Hard: true}
	if err != nil {
		c.Detail = fmt.Sprintf("remote compile with %s failed (is %s allowed in distccd's compiler list, and this client allowed by --allow?): %v: %s", compiler, compiler, err, lastLines(out, 3))
		return append(checks, c)
	}
	remoteObj, _ := os.ReadFile(obj)
	remoteVer, localVer := probeVersion(remoteObj), probeVersion(localObj)
	switch {
	case bytes.Equal(remoteObj, localObj):
		c.OK, c.Detail = true, "same compiler as here: "+localVer
	case remoteVer != localVer:
		c.Detail = fmt.Sprintf("host compiles with %q, this machine with %q: objects would differ; install the same compiler version there", remoteVer, localVer)
	default:
		c.Detail = fmt.Sprintf("same version %q, but the probe object differs (different compiler build or configuration)", localVer)
	}
	return append(checks, c)
}

// probeVersion reads the __VERSION__ string embedded by the probe.
func probeVersion(obj []byte) string {
	i := bytes.Index(obj, []byte(probeMarker))
	if i < 0 {
		return "unknown"
	}
	rest := obj[i+len(probeMarker):]
	j := bytes.Index(rest, []byte(probeEnd))
	if j < 0 {
		return "unknown"
	}
	return string(rest[:j])
}

func runIn(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
