package builder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// A build whose nodes lack declared distribution packages stops before
// anything runs, naming every node's missing packages and one apt-get
// line; nodes that are not built here (external, cached) need none.
func TestBuildStopsOnMissingHostPackages(t *testing.T) {
	dir := t.TempDir()
	for name, pkgs := range map[string]string{"a": "[liba-dev, libz-dev]", "b": "[libz-dev, libb-dev]", "c": "[libc-dev]"} {
		os.WriteFile(filepath.Join(dir, name+".yaml"), []byte("name: "+name+"\nversions:\n  - version: \"1\"\n    source: {local: .}\n    host_packages: "+pkgs+"\nbuild:\n  cmake: {}\n"), 0o644)
	}
	set, err := recipe.Load(recipe.OSDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := MakePlan(context.Background(), set, PlanOptions{Settings: recipe.Settings{Targets: []string{"a", "b", "c"}}, HostCompiler: "cc 1"})
	if err != nil {
		t.Fatal(err)
	}
	plan.Node("c").Status = StatusCached
	installed := map[string]bool{"libb-dev": true, "libc-dev": false}
	missing := func(_ context.Context, pkgs []string) ([]string, error) {
		var m []string
		for _, p := range pkgs {
			if !installed[p] {
				m = append(m, p)
			}
		}
		return m, nil
	}
	err = checkHostPackages(context.Background(), plan, missing)
	want := "a 1 needs distribution packages that are not installed: liba-dev libz-dev\n" +
		"b 1 needs distribution packages that are not installed: libz-dev\n" +
		"install them first (as root): apt-get install -y liba-dev libz-dev\n"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
	installed["liba-dev"], installed["libz-dev"] = true, true
	if err := checkHostPackages(context.Background(), plan, missing); err != nil {
		t.Errorf("all installed (c is cached): %v", err)
	}
}
