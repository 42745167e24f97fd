// Package builder is the recipe engine: it resolves a set of recipes
// (package builder/recipe) and the project's settings into a graph,
// computes a content-hashed plan, and executes it (fetch, extract, patch,
// configure, build, install) into a store of immutable install trees
// (package builder/store); it installs a closure into a prefix, verifies
// that a tree rebuilds identically, and assembles images from trees.
//
// Planning is pure (no network, no writes); execution commits each node
// with one atomic rename so that a crash never leaves a tree that looks
// complete.
package builder
