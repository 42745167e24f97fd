package builder

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// GC's reachability must plan like every other command: the built-in
// recipes' local sources resolve against the project's source dir (the
// checkout or the unpacked embedded copy), never build.yaml's directory.
// Otherwise GC fails, or plans other hashes and deletes trees in use.
func TestReachableNodesUseBuiltinSourceDir(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("builtin/loc.yaml", "name: loc\nversions:\n  - version: \"1\"\n    source: {local: src}\nbuild:\n  script:\n    steps:\n      - name: s\n        run: \"true\"\n")
	write("checkout/src/x", "x\n")
	write("project/build.yaml", "targets: [loc]\n")
	p, err := OpenProject(ProjectOptions{
		ConfigFile:     filepath.Join(root, "project", "build.yaml"),
		ConfigExplicit: true,
		StoreDir:       filepath.Join(root, "store"),
		Builtin:        os.DirFS(filepath.Join(root, "builtin")),
		ProjectDirHint: filepath.Join(root, "checkout"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plan, err := p.Plan(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(p.Store.NodeDir(plan.Node("loc").Key()))
	reach, err := p.ReachableNodes(ctx)
	if err != nil {
		t.Fatalf("ReachableNodes: %v", err)
	}
	if !reach[want] {
		t.Errorf("ReachableNodes = %v, want it to hold %s, the node the build plans", reach, want)
	}
}
