package builder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// StatusRemote marks a node that is not in the local store but whose
// install tree a shared binary cache (an OCI registry, see package
// builder/remote) holds under the node's hash: it is pulled, not built.
// Pulling turns it into StatusCached before the executor runs.
const StatusRemote Status = "cached (remote)"

// PullStagingDir is the private staging area for a tree pulled from a
// binary cache. Only the holder of the node's store lock may use it.
func (s *Store) PullStagingDir(n *Node) string {
	return filepath.Join(s.Root, "staging", s.nodeKey(n)+".pull")
}

// LockKey is the key of the node's store lock, the one builds take.
func (s *Store) LockKey(n *Node) string { return s.nodeKey(n) }

// CommitVerified commits a staging directory whose tree/ was already
// checked against m (every file's sha256, mode and link target, and the
// tree digest): it writes manifest.json and renames staging into nodes/.
// The manifest's hash must be the node's.
func (s *Store) CommitVerified(n *Node, staging string, m *Manifest) error {
	if m.Hash != n.Hash {
		return fmt.Errorf("committing %s: manifest is for hash %s, node is %s", n.Name, m.Hash, n.Hash)
	}
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(staging, "manifest.json"), data); err != nil {
		return fmt.Errorf("committing %s: %w", n.Name, err)
	}
	dst := s.NodeDir(n)
	if err := os.Rename(staging, dst); err != nil {
		return fmt.Errorf("committing %s into the store: %w", n.Name, err)
	}
	syncDir(filepath.Dir(dst))
	return nil
}
