package builder

import (
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

type baseLaunch struct{ Launch }

func (baseLaunch) Env() []string { return []string{"TRITONBUILD_BROKER=/s"} }
func (baseLaunch) Wrap(cc, cxx string) (string, string) {
	return "/tb launch -- " + cc, "/tb launch -- " + cxx
}

func TestChainLaunchAddsCcacheAndDistcc(t *testing.T) {
	inner, env := toolchain.CompileChain(&toolchain.CcacheConfig{Dir: "/c"}, &toolchain.DistccConfig{Hosts: []string{"h1/4"}}, "/store/work/x")
	l := &chainLaunch{Launch: baseLaunch{}, exe: "/tb", inner: inner, env: env}
	args := " " + strings.Join(l.CMakeArgs(), " ") + " "
	if !strings.Contains(args, " -DCMAKE_CXX_COMPILER_LAUNCHER=/tb;launch;--;ccache ") ||
		!strings.Contains(args, " -DCMAKE_CXX_LINKER_LAUNCHER=/tb;launch;-- ") {
		t.Errorf("CMakeArgs = %s", args)
	}
	e := strings.Join(l.Env(), " ")
	for _, want := range []string{"TRITONBUILD_BROKER=/s", "CCACHE_BASEDIR=/store/work/x", "CCACHE_PREFIX=distcc", "DISTCC_HOSTS=h1:3632/4"} {
		if !strings.Contains(e, want) {
			t.Errorf("Env lacks %s: %s", want, e)
		}
	}
	if cc, _ := l.Wrap("cc", "c++"); cc != "/tb launch -- ccache cc" {
		t.Errorf("Wrap = %q", cc)
	}
}

func TestAddRemoteSlots(t *testing.T) {
	d, err := (&recipe.DistributeSettings{Distcc: &recipe.DistccSettings{Hosts: []string{"a/3", "b/5"}}}).Config()
	if err != nil {
		t.Fatal(err)
	}
	plan := &Plan{Nodes: []*Node{{Name: "x", Jobs: &JobPlan{Compile: 2, Link: 1, Why: "2 CPUs"}}, {Name: "ext"}}}
	addRemoteSlots(plan, d)
	if j := plan.Nodes[0].Jobs; j.Compile != 10 || j.Link != 1 || !strings.Contains(j.Why, "+8 remote") {
		t.Errorf("jobs after addRemoteSlots: %+v", j)
	}
}
