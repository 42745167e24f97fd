package memtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tritonbuild/tritonbuild/toolchain"
)

// UnavailableError says why a memory cgroup could not be made here (not
// root, no memory controller, a v2 parent that cannot delegate). Tests skip
// on it with its text.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return "memory cgroup unavailable: " + e.Reason }

// Group is a child memory cgroup with a hard limit, created under the
// calling process's own memory cgroup. The caller stays outside it; only
// commands started by Command run inside.
type Group struct {
	// Cgroup is the child group, readable with toolchain's cgroup methods.
	Cgroup *toolchain.Cgroup
	Limit  int64
}

// NewGroup creates the child group with the given limit. On v1 it sets
// memory.limit_in_bytes (and memory.memsw.limit_in_bytes when swap
// accounting exists, so the limit cannot be dodged by swapping); on v2
// memory.max and memory.swap.max = 0.
func NewGroup(limit int64) (*Group, error) {
	if os.Geteuid() != 0 {
		return nil, &UnavailableError{Reason: "creating cgroups needs root"}
	}
	own, err := toolchain.FindCgroup("", "memory")
	if err != nil {
		return nil, &UnavailableError{Reason: err.Error()}
	}
	if own == nil {
		return nil, &UnavailableError{Reason: "no memory controller in this process's cgroups"}
	}
	name := fmt.Sprintf("tritonbuild-memtest-%d-%d", os.Getpid(), time.Now().UnixNano())
	dir := filepath.Join(own.Dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, &UnavailableError{Reason: fmt.Sprintf("creating %s: %v", dir, err)}
	}
	g := &Group{
		Cgroup: &toolchain.Cgroup{Version: own.Version, Path: filepath.Join(own.Path, name), Dir: dir, Mount: own.Mount},
		Limit:  limit,
	}
	lim := strconv.FormatInt(limit, 10)
	var settings [][2]string
	if own.Version == 1 {
		settings = [][2]string{{"memory.limit_in_bytes", lim}}
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			settings = append(settings, [2]string{"memory.memsw.limit_in_bytes", lim})
		}
	} else {
		if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil {
			// Delegate the controller to children; this fails (EBUSY) when
			// the parent itself holds processes and is not the root group.
			_ = os.WriteFile(filepath.Join(own.Dir, "cgroup.subtree_control"), []byte("+memory"), 0o644) // the Stat below says whether it took
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil {
			os.Remove(dir)
			return nil, &UnavailableError{Reason: fmt.Sprintf("%s has no memory.max: the memory controller is not delegated to it (parent's cgroup.subtree_control)", dir)}
		}
		settings = [][2]string{{"memory.max", lim}}
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			settings = append(settings, [2]string{"memory.swap.max", "0"})
		}
	}
	for _, s := range settings {
		if err := os.WriteFile(filepath.Join(dir, s[0]), []byte(s[1]), 0o644); err != nil {
			os.Remove(dir)
			return nil, &UnavailableError{Reason: fmt.Sprintf("setting %s: %v", s[0], err)}
		}
	}
	if _, err := g.Cgroup.OOMKills(); err != nil {
		os.Remove(dir)
		return nil, &UnavailableError{Reason: err.Error()}
	}
	return g, nil
}

// Command returns a command that joins the group before it execs name:
// "sh -c 'echo $$ > cgroup.procs; exec "$@"'". Everything it starts is
// charged to the group and killed by its OOM killer.
func (g *Group) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	procs := filepath.Join(g.Cgroup.Dir, "cgroup.procs")
	script := `echo $$ > "$0" && exec "$@"`
	return exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, procs, name}, args...)...)
}

// OOMKills reads the group's oom_kill counter.
func (g *Group) OOMKills() (int64, error) { return g.Cgroup.OOMKills() }

// Close removes the group once its processes are gone (waiting a little
// for the kernel to reap them).
func (g *Group) Close() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(g.Cgroup.Dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(g.Cgroup.Dir, "cgroup.procs"))
			return fmt.Errorf("removing cgroup %s (processes left: %q): %w", g.Cgroup.Dir, strings.TrimSpace(string(procs)), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
