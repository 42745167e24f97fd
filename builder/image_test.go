package builder

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeFiles writes name -> content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// linkedRepository is a model repository whose model file and shared
// directory live outside it, reached by an absolute and by a relative
// link climbing out; it also holds a link within it that loops and one
// that dangles. It returns the repository and the outside directory.
func linkedRepository(t *testing.T) (repo, outside string) {
	t.Helper()
	base := t.TempDir()
	repo, outside = filepath.Join(base, "repo"), filepath.Join(base, "outside")
	writeFiles(t, outside, map[string]string{"weights.bin": "aaaa", "shared/vocab.txt": "one"})
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": `backend: "python"`})
	for link, target := range map[string]string{
		"m/1/model.pt": filepath.Join(outside, "weights.bin"),
		"m/shared":     "../../outside/shared",
		"m/self":       "..",
		"m/dangling":   "/nonexistent/tritonbuild-test",
	} {
		p := filepath.Join(repo, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return repo, outside
}

// The image key follows what the image's model layer holds: the content
// behind links leading out of the repository (which the image copies),
// and the content of a repository given as a symlink to a directory.
// Changing any of it, even keeping its size, changes the key; the same
// content gives the same key.
func TestImageKeyFollowsModelRepositoryLinks(t *testing.T) {
	repo, outside := linkedRepository(t)
	viaLink := filepath.Join(t.TempDir(), "models")
	if err := os.Symlink(repo, viaLink); err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1700000000, 0)
	key := func(dir string) string {
		t.Helper()
		// A registry base: no host file's state is part of the key.
		k, err := imageKey(nil, ImageRequest{ModelRepository: dir, Base: "registry.example/base:1"}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	seen := map[string]string{}
	check := func(what string) {
		t.Helper()
		k := key(repo)
		if again := key(repo); again != k {
			t.Fatalf("%s: two keys of the same content differ", what)
		}
		if kl := key(viaLink); kl != k {
			t.Errorf("%s: the repository through a symlink has another key than the repository itself", what)
		}
		if before, ok := seen[k]; ok {
			t.Errorf("%s: the key is the one of %s: the image would be called unchanged", what, before)
		}
		seen[k] = what
	}
	check("first")
	writeFiles(t, outside, map[string]string{"weights.bin": "bbbb"})
	check("the linked-to model file changed")
	writeFiles(t, outside, map[string]string{"shared/vocab.txt": "two"})
	check("a file in the linked-to directory changed")
	writeFiles(t, outside, map[string]string{"shared/new.txt": "new"})
	check("a file was added to the linked-to directory")
	writeFiles(t, repo, map[string]string{"m/config.pbtxt": `backend: "pytorch"`})
	check("a file of the repository changed")
}

// BuildImage writes an image again when a file a model-repository link
// leads to changed, and calls it unchanged when nothing did; the model
// layer then holds the new content.
func TestImageRebuiltWhenALinkedModelFileChanges(t *testing.T) {
	m := newMiniProject(t, map[string]string{
		"recipes/serve.yaml": `name: serve
versions:
  - version: "1"
    source: {local: ../src}
build:
  script:
    steps:
      - name: install
        run: mkdir -p "$DESTDIR${prefix}/bin" && cp tritonserver "$DESTDIR${prefix}/bin/" && chmod 755 "$DESTDIR${prefix}/bin/tritonserver"
`,
		"src/tritonserver": "#!/bin/sh\n",
	})
	m.targets = []string{"serve"}
	plan := m.mustBuild(m.store)
	p := &Project{Store: m.store}
	repo, outside := linkedRepository(t)
	req := ImageRequest{Target: "serve", ModelRepository: repo, Layout: filepath.Join(t.TempDir(), "layout"), Epoch: time.Unix(1700000000, 0)}
	ctx := context.Background()
	build := func() *ImageResult {
		t.Helper()
		res, err := p.BuildImage(ctx, plan, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := build()
	if first.Unchanged {
		t.Fatal("the first image was called unchanged")
	}
	if res := build(); !res.Unchanged || res.Digest != first.Digest {
		t.Fatalf("nothing changed, yet the image was written again (unchanged %v, %s vs %s)", res.Unchanged, res.Digest, first.Digest)
	}
	writeFiles(t, outside, map[string]string{"weights.bin": "bbbb"})
	res := build()
	if res.Unchanged || res.Digest == first.Digest {
		t.Fatalf("the linked-to model file changed, yet the image was not written again (unchanged %v, digest %s)", res.Unchanged, res.Digest)
	}
	modelsLayer := func(s *ImageResult) string {
		t.Helper()
		d, ok := s.Summary.LayerDigest("models")
		if !ok {
			t.Fatal("no models layer in the image")
		}
		return d.String()
	}
	if modelsLayer(res) == modelsLayer(first) {
		t.Error("the models layer is the same after the linked-to file changed")
	}
}
