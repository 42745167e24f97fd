package recipe

import (
	"strings"
	"testing"
)

func TestScaleOutSettings(t *testing.T) {
	if (*CcacheSettings)(nil).Config("/p") != nil {
		t.Error("nil ccache settings gave a config")
	}
	if c := (&CcacheSettings{Dir: "cc"}).Config("/p"); c.Dir != "/p/cc" {
		t.Errorf("relative dir resolved to %q", c.Dir)
	}
	if _, err := (&DistributeSettings{Distcc: &DistccSettings{Hosts: []string{"h/x"}}}).Config(); err == nil || !strings.Contains(err.Error(), "distribute.distcc") {
		t.Errorf("bad host: %v", err)
	}
	d, err := (&DistributeSettings{Distcc: &DistccSettings{Hosts: []string{"a/3", "b/5"}}}).Config()
	if err != nil {
		t.Fatal(err)
	}
	if d.Slots() != 8 {
		t.Errorf("slots of a/3 and b/5: %d, want 8", d.Slots())
	}
}
