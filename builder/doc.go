// Package builder is the recipe engine: it loads and validates recipes and the
// project's build.yaml, resolves them into a graph, computes a content-hashed
// plan, and executes it (fetch, extract, patch, configure, build, install)
// into a store of immutable install trees.
//
// The flow is Load -> Resolve -> Plan -> Execute. Loading is strict and every
// error carries file:line:column; planning is pure (no network, no writes);
// execution commits each node with one atomic rename so that a crash never
// leaves a tree that looks complete.
package builder
