// Package store is tritonbuild's store of immutable install trees: one
// directory per node (recipe, version, content hash) holding the tree and
// its manifest (every entry's path, mode, size, sha256 and link target, and
// the tree's digest), beside the build work dirs, logs, learned memory
// statistics, the source cache and the per-node locks.
//
// A node is committed by one rename of a staging directory whose manifest
// was written first, under the node's lock, so a crash leaves either
// nothing or a complete tree, and two processes never build or pull the
// same node at once. The layout and the manifest format are shared by
// every machine using a binary cache: keep them stable.
package store
