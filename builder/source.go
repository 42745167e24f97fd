package builder

// Every switch on a recipe's source kind is in this file: how a plan pins
// the source, how the executor fetches it, and how a tree's manifest
// names it. A new kind is added here and in package fetch.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
	"github.com/tritonbuild/tritonbuild/builder/store"
)

// sourceDigest is the content identity of the node's sources: the sha256
// for archives, the commit for git, a tree hash for local directories.
// Patches' contents are included.
func (pl *planner) sourceDigest(n *Node) (string, error) {
	s := n.Ver.Source
	var id string
	switch s.Kind() {
	case recipe.SourceURL, recipe.SourceApt:
		id = "sha256:" + s.SHA256
	case recipe.SourceGit:
		id = "git:" + s.Commit
	case recipe.SourceLocal:
		dir := n.Recipe.ResolvePath(s.Local, pl.opts.ProjectDir)
		h, err := fetch.HashDir(dir, localExcluded(&s))
		if err != nil {
			return "", fmt.Errorf("%s: hashing local source %s: %w", n.Recipe.File(), dir, err)
		}
		id = "local:" + h
	}
	patches := append(append([]recipe.Patch{}, n.Recipe.Patches...), n.Ver.Patches...)
	for _, p := range patches {
		data, err := os.ReadFile(n.Recipe.ResolvePath(p.File, pl.opts.ProjectDir))
		if err != nil {
			return "", fmt.Errorf("%s: patch %s: %w", n.Recipe.File(), p.File, err)
		}
		sum := sha256.Sum256(data)
		got := hex.EncodeToString(sum[:])
		if p.SHA256 != "" && p.SHA256 != got {
			return "", fmt.Errorf("%s: patch %s: sha256 %s, recipe says %s", n.Recipe.File(), p.File, got, p.SHA256)
		}
		id += "+patch:" + got
	}
	return id, nil
}

// localExcluded is what a local source leaves out of both its hash and the
// copy the build works in (copyTree): what its globs exclude, and the VCS
// metadata (.git directories and submodules' .git files), which the copy
// never holds and which changes with every commit or index refresh.
func localExcluded(s *recipe.Source) func(rel string) bool {
	return func(rel string) bool { return path.Base(rel) == ".git" || s.Excluded(rel) }
}

// nodeMeta is what the node's manifest records about it, for SBOMs and
// caches.
func nodeMeta(n *Node) store.NodeMeta {
	m := store.NodeMeta{Name: n.Name, Version: n.Version, Hash: n.Hash, License: n.Recipe.License, Homepage: n.Recipe.Homepage, Epoch: n.Ver.Epoch}
	s := n.Ver.Source
	switch s.Kind() {
	case recipe.SourceURL:
		m.SourceURL, m.SHA256 = s.URL, s.SHA256
	case recipe.SourceApt:
		m.SourceURL, m.SHA256 = "apt:"+s.Apt+"="+s.AptVersion+"/"+s.File, s.SHA256
	case recipe.SourceGit:
		m.SourceURL = "git+" + s.Git + "@" + s.Commit
	case recipe.SourceLocal:
		m.SourceURL = "local:" + n.SourceDigest
	}
	return m
}

// fetchSource puts the node's archive into the source cache and returns its
// path ("" for local sources, which are read in place).
func (e *Executor) fetchSource(ctx context.Context, n *Node) (string, error) {
	s := n.Ver.Source
	var archive string
	var err error
	cache := e.Store.Sources()
	switch s.Kind() {
	case recipe.SourceURL:
		archive, err = fetch.FetchURL(ctx, fetch.URLSpec{URLs: mirrorURLs(e.Settings.Mirrors, n.Name, s), SHA256: s.SHA256}, cache, e.FetchOptions)
	case recipe.SourceApt:
		archive, err = fetch.FetchApt(ctx, fetch.AptSpec{Package: s.Apt, Version: s.AptVersion, File: s.File, SHA256: s.SHA256}, cache, e.FetchOptions)
	case recipe.SourceGit:
		archive, err = fetch.FetchGit(ctx, fetch.GitSpec{URL: s.Git, Tag: s.Tag, Commit: s.Commit, Submodules: s.Submodules}, cache, e.FetchOptions)
	}
	if err != nil {
		return "", &FetchError{Name: n.Name, Version: n.Version, Err: err, Alternatives: SourceAlternatives(n, e.Config)}
	}
	return archive, nil
}

// SourceReach is whether a planned node's source can be fetched from here;
// when it cannot, Alternatives says what else gets the node.
type SourceReach struct {
	Node *Node
	fetch.Reach
	Alternatives []string
}

// ReachSources asks, for each node that would be built here, whether its
// source is cached or reachable (fetch.ReachURL, ReachGit, ReachApt; a
// local source was read by planning already), a few nodes at a time. It
// downloads nothing; every request is bounded by FetchOptions.ReachTimeout.
func (e *Executor) ReachSources(ctx context.Context, nodes []*Node) []SourceReach {
	var todo []*Node
	for _, n := range nodes {
		if n.Status == StatusBuild {
			todo = append(todo, n)
		}
	}
	out := make([]SourceReach, len(todo))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, n := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := e.reachSource(ctx, n)
			out[i] = SourceReach{Node: n, Reach: r}
			if !r.OK {
				out[i].Alternatives = SourceAlternatives(n, e.Config)
			}
		}()
	}
	wg.Wait()
	return out
}

func (e *Executor) reachSource(ctx context.Context, n *Node) fetch.Reach {
	s := n.Ver.Source
	cache := e.Store.Sources()
	switch s.Kind() {
	case recipe.SourceURL:
		return fetch.ReachURL(ctx, fetch.URLSpec{URLs: mirrorURLs(e.Settings.Mirrors, n.Name, s), SHA256: s.SHA256}, cache, e.FetchOptions)
	case recipe.SourceApt:
		return fetch.ReachApt(ctx, fetch.AptSpec{Package: s.Apt, Version: s.AptVersion, File: s.File, SHA256: s.SHA256}, cache, e.FetchOptions)
	case recipe.SourceGit:
		return fetch.ReachGit(ctx, fetch.GitSpec{URL: s.Git, Tag: s.Tag, Commit: s.Commit, Submodules: s.Submodules}, cache, e.FetchOptions)
	case recipe.SourceLocal:
		return fetch.Reach{OK: true, Detail: "local directory, read when planning"}
	}
	return fetch.Reach{Detail: "unknown source kind"}
}

// mirrorURLs puts the configured mirrors (MIRROR/NAME/FILE) and the
// recipe's own mirrors before the upstream URL.
func mirrorURLs(mirrors []string, name string, s recipe.Source) []string {
	var out []string
	file := path.Base(s.URL)
	for _, m := range mirrors {
		out = append(out, strings.TrimSuffix(m, "/")+"/"+name+"/"+file)
	}
	out = append(out, s.Mirrors...)
	return append(out, s.URL)
}
