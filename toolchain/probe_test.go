package toolchain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	kib = int64(1024)
	mib = 1024 * kib
	gib = 1024 * mib
)

func probeFixture(t *testing.T, name string) *Host {
	t.Helper()
	h, err := Probe(context.Background(), ProbeOptions{Root: filepath.Join("testdata", name), Tools: []string{}})
	if err != nil {
		t.Fatalf("Probe(%s): %v", name, err)
	}
	return h
}

func TestProbeCgroupV1Fixture(t *testing.T) {
	h := probeFixture(t, "v1")
	if h.CPU.Online != 8 || h.CPU.Affinity != 8 {
		t.Errorf("CPU online/affinity = %d/%d, want 8/8", h.CPU.Online, h.CPU.Affinity)
	}
	// The quota sits on an ancestor (job1): 150000/100000 = 1.5 CPUs -> 2.
	if h.CPU.Quota != 1.5 || h.CPU.Usable != 2 {
		t.Errorf("CPU quota/usable = %v/%d, want 1.5/2 (%s)", h.CPU.Quota, h.CPU.Usable, h.CPU.Reason)
	}
	m := h.Memory
	if m.Cgroup == nil || m.Cgroup.Version != 1 || m.Cgroup.Path != "/process_api/job1/build" {
		t.Fatalf("memory cgroup = %+v, want v1 /process_api/job1/build", m.Cgroup)
	}
	if m.Total != 32768000*kib || m.Available != 24000000*kib {
		t.Errorf("meminfo total/available = %d/%d", m.Total, m.Available)
	}
	// The own group says "no limit" (the huge v1 value); job1 binds at 8 GiB
	// with 3 GiB charged, 1 GiB of it inactive file cache.
	if m.CgroupLimit.Limit != 8*gib || !strings.HasSuffix(m.CgroupLimit.LimitDir, "process_api/job1") {
		t.Errorf("limit = %d at %q, want 8 GiB at process_api/job1", m.CgroupLimit.Limit, m.CgroupLimit.LimitDir)
	}
	if m.CgroupLimit.Usage != 2*gib || m.CgroupLimit.Available != 6*gib || m.Usable != 6*gib {
		t.Errorf("usage/available/usable = %d/%d/%d, want 2/6/6 GiB", m.CgroupLimit.Usage, m.CgroupLimit.Available, m.Usable)
	}
	if !strings.Contains(m.Reason, "cgroup v1 limit 8.0 GiB") {
		t.Errorf("reason %q does not name the cgroup limit", m.Reason)
	}
	n, err := m.Cgroup.OOMKills()
	if err != nil || n != 2 {
		t.Errorf("OOMKills = %d, %v; want 2", n, err)
	}
}

func TestProbeCgroupV2Fixture(t *testing.T) {
	h := probeFixture(t, "v2")
	if h.CPU.Affinity != 5 || h.CPU.Online != 8 {
		t.Errorf("affinity/online = %d/%d, want 5/8", h.CPU.Affinity, h.CPU.Online)
	}
	// build.scope says "max"; user.slice allows 3 CPUs.
	if h.CPU.Quota != 3 || h.CPU.Usable != 3 {
		t.Errorf("quota/usable = %v/%d, want 3/3", h.CPU.Quota, h.CPU.Usable)
	}
	m := h.Memory
	if m.Cgroup == nil || m.Cgroup.Version != 2 {
		t.Fatalf("memory cgroup = %+v, want v2", m.Cgroup)
	}
	// memory.max "max" in the own group; user.slice has 4 GiB, 2 GiB
	// charged of which 0.5 GiB is inactive file cache.
	if m.CgroupLimit.Limit != 4*gib || m.CgroupLimit.Available != 2*gib+gib/2 || m.Usable != 2*gib+gib/2 {
		t.Errorf("limit/available/usable = %d/%d/%d", m.CgroupLimit.Limit, m.CgroupLimit.Available, m.Usable)
	}
	n, err := m.Cgroup.OOMKills()
	if err != nil || n != 3 {
		t.Errorf("OOMKills = %d, %v; want 3", n, err)
	}
}

func TestProbeCgroupV2ContainerMountRoot(t *testing.T) {
	h := probeFixture(t, "v2container")
	m := h.Memory
	if m.Cgroup == nil {
		t.Fatal("no memory cgroup found")
	}
	want := filepath.Join("testdata", "v2container", "sys/fs/cgroup/ctr")
	if m.Cgroup.Dir != want {
		t.Errorf("dir = %q, want %q (mount root stripped from the membership path)", m.Cgroup.Dir, want)
	}
	if m.CgroupLimit.Limit != 600*mib || m.CgroupLimit.Available != 500*mib || m.Usable != 500*mib {
		t.Errorf("limit/available/usable = %d/%d/%d", m.CgroupLimit.Limit, m.CgroupLimit.Available, m.Usable)
	}
	if h.CPU.Usable != 1 || h.CPU.Quota != 0.5 {
		t.Errorf("CPU usable/quota = %d/%v, want 1/0.5", h.CPU.Usable, h.CPU.Quota)
	}
}

func TestProbeErrorsNameTheFile(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/v2")); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(root, "sys/fs/cgroup/user.slice/memory.max")
	if err := os.WriteFile(bad, []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Probe(context.Background(), ProbeOptions{Root: root, Tools: []string{}})
	if err == nil || !strings.Contains(err.Error(), "user.slice/memory.max") || !strings.Contains(err.Error(), "lots") {
		t.Fatalf("err = %v, want one naming memory.max and the bad value", err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/self/cgroup"), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Probe(context.Background(), ProbeOptions{Root: root, Tools: []string{}})
	if err == nil || !strings.Contains(err.Error(), "cgroup:1") {
		t.Fatalf("err = %v, want file:line of the bad cgroup line", err)
	}
}

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0} {
		got, err := countCPUList(in)
		if err != nil || got != want {
			t.Errorf("countCPUList(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := countCPUList("3-1"); err == nil {
		t.Error("countCPUList(3-1) succeeded")
	}
}

func TestProbeToolsAndDisk(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'fakecc (Debian 12.2.0-14) 12.2.0'\necho 'Copyright'\n"
	if err := os.WriteFile(filepath.Join(bin, "cc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "not", "yet", "made")
	h, err := Probe(context.Background(), ProbeOptions{Root: "testdata/v2", Tools: []string{"cc", "ninja"}, PATH: bin, Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	cc := h.Tool("cc")
	if cc == nil || !cc.Found || cc.Version != "12.2.0" || cc.Banner != "fakecc (Debian 12.2.0-14) 12.2.0" {
		t.Errorf("cc = %+v", cc)
	}
	if n := h.Tool("ninja"); n == nil || n.Found || n.Error == "" {
		t.Errorf("ninja = %+v, want not found with an error", n)
	}
	if len(h.Disks) != 1 || h.Disks[0].Free <= 0 || h.Disks[0].Total < h.Disks[0].Free {
		t.Fatalf("disks = %+v", h.Disks)
	}
	if strings.Contains(h.Disks[0].Measured, "not/yet") {
		t.Errorf("measured %q, want the nearest existing parent", h.Disks[0].Measured)
	}
}

func TestProbeLiveHost(t *testing.T) {
	h, err := Probe(context.Background(), ProbeOptions{Dirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if h.CPU.Usable < 1 || h.Memory.Usable <= 0 || h.Memory.Total < h.Memory.Usable {
		t.Errorf("implausible live probe: %+v", h)
	}
	t.Logf("CPUs %d (%s); memory %s (%s)", h.CPU.Usable, h.CPU.Reason, FormatBytes(h.Memory.Usable), h.Memory.Reason)
}
