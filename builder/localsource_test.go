package builder

import (
	"os"
	"path/filepath"
	"testing"
)

// A local source that is a git work tree: the build copies it without its
// .git metadata, so the hash must not see it either; otherwise every
// commit, fetch or index refresh of the repository rebuilds the node.
func TestLocalSourceHashIgnoresGitMetadata(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/loc.yaml": "name: loc\nversions:\n  - version: \"1\"\n    source: {local: ../src}\nbuild:\n  script:\n    steps:\n      - name: s\n        run: \"true\"\n",
		"src/x":            "x\n",
		"src/.git/HEAD":    "ref: refs/heads/main\n",
		"src/sub/.git":     "gitdir: ../.git/modules/sub\n",
	})
	m.targets = []string{"loc"}
	h1 := m.plan(m.store).Node("loc").Hash
	for name, content := range map[string]string{"src/.git/HEAD": "0123456789abcdef0123456789abcdef01234567\n", "src/.git/index": "DIRC", "src/sub/.git": "gitdir: elsewhere\n"} {
		if err := os.WriteFile(filepath.Join(m.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if h2 := m.plan(m.store).Node("loc").Hash; h2 != h1 {
		t.Errorf("changing only .git metadata changed the node hash: %s -> %s", h1[:16], h2[:16])
	}
	if err := os.WriteFile(filepath.Join(m.dir, "src", "x"), []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h3 := m.plan(m.store).Node("loc").Hash; h3 == h1 {
		t.Error("changing a source file did not change the node hash")
	}
}
