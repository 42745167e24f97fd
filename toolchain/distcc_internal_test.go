package toolchain

import (
	"context"
	"strings"
	"testing"
)

func TestSendsRemote(t *testing.T) {
	hosts := []string{"DISTCC_HOSTS=h1/4"}
	cases := []struct {
		args []string
		env  []string
		want bool
	}{
		{[]string{"distcc", "cc", "-c", "a.c"}, hosts, true},
		{[]string{"/usr/bin/distcc", "cc", "-c", "a.c"}, hosts, true},
		{[]string{"ccache", "cc", "-c", "a.c"}, append(hosts, "CCACHE_PREFIX=distcc"), true},
		{[]string{"ccache", "cc", "-c", "a.c"}, hosts, false},
		{[]string{"distcc", "cc", "-c", "a.c"}, nil, false},
		{[]string{"cc", "-c", "a.c"}, hosts, false},
	}
	for _, c := range cases {
		if got := sendsRemote(c.args, c.env); got != c.want {
			t.Errorf("sendsRemote(%v, %v) = %v, want %v", c.args, c.env, got, c.want)
		}
	}
}

// TestBrokerRemoteCompilesCostLittle: with a budget for one local compile,
// remote compiles run side by side and leave the learned stats alone.
func TestBrokerRemoteCompilesCostLittle(t *testing.T) {
	ctx := context.Background()
	stats := NewStats("x", "1")
	b, err := StartBroker(ctx, BrokerOptions{Budget: 1 << 30, Stats: stats, Declared: Profile{CompileBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var leases []*brokerLease
	for i := 0; i < 3; i++ {
		l, err := acquire(ctx, b.SocketPath(), CommandID{Kind: KindCompile, Key: "/src/a" + string(rune('0'+i)) + ".c"}, true)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if c := b.Counters(); c.PeakConcurrency != 3 || c.Remote != 3 {
		t.Errorf("counters %+v: want 3 remote compiles at once under a one-compile budget", c)
	}
	for _, l := range leases {
		if err := l.done(runResult{peakRSS: 10 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	if v := stats.KindP95(KindCompile); v != 0 {
		t.Errorf("remote compiles recorded a local peak of %d", v)
	}
}

func TestParseDistccHost(t *testing.T) {
	good := map[string]string{
		"build3":           "build3:3632/4",
		"build3:4000":      "build3:4000/4",
		"build3/8":         "build3:3632/8",
		"10.0.0.7:3633/16": "10.0.0.7:3633/16",
		"[::1]:3632/2":     "[::1]:3632/2",
		" farm.example/3 ": "farm.example:3632/3",
	}
	for in, want := range good {
		h, err := ParseDistccHost(in)
		if err != nil || h.Spec() != want {
			t.Errorf("ParseDistccHost(%q) = %q, %v; want %q", in, h.Spec(), err, want)
		}
	}
	for _, bad := range []string{"", "localhost", "h/0", "h/x", "h:99999", "h,lzo", "@h", "[::1", ":3632"} {
		if _, err := ParseDistccHost(bad); err == nil {
			t.Errorf("ParseDistccHost(%q) accepted", bad)
		}
	}
	d := DistccConfig{Hosts: []string{"a/3", "b:1234"}}
	if d.Slots() != 7 {
		t.Errorf("Slots = %d, want 7", d.Slots())
	}
	jp := d.AdjustJobs(JobPlan{Jobs: 2, LinkJobs: 1, Reason: "jobs 2"})
	if jp.Jobs != 9 || jp.LinkJobs != 1 || !strings.Contains(jp.Reason, "+7 remote") {
		t.Errorf("AdjustJobs = %+v", jp)
	}
	env := strings.Join(d.Env(), " ")
	if !strings.Contains(env, "DISTCC_HOSTS=a:3632/3 b:1234/4") || !strings.Contains(env, "DISTCC_FALLBACK=0") {
		t.Errorf("Env = %s", env)
	}
	inner, cenv := CompileChain(&CcacheConfig{}, &d, "/w")
	if strings.Join(inner, " ") != "ccache" || !strings.Contains(strings.Join(cenv, " "), "CCACHE_PREFIX=distcc") {
		t.Errorf("CompileChain = %v %v", inner, cenv)
	}
	if checks := DistccChecks(context.Background(), DistccConfig{Hosts: []string{"h/0"}}, "cc"); len(checks) != 1 || checks[0].OK {
		t.Errorf("bad host spec checks = %+v", checks)
	}
}
