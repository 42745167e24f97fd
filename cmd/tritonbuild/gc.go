package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// newGCCmd is `gc`: report (or with --delete remove) what the store no
// longer needs.
func newGCCmd(g *globals) *cobra.Command {
	var del bool
	keep := "2GiB"
	var envs string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "List (with --delete: remove) failed attempts, staging and work dirs, trees no profile reaches, caches beyond a size",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			size, err := recipe.ParseByteSize(keep)
			if err != nil {
				return fmt.Errorf("--keep-cache: %w", err)
			}
			w := cmd.ErrOrStderr()
			reach, err := p.ReachableNodes(ctxOf(cmd))
			if err != nil {
				fmt.Fprintf(w, "keeping every tree: %v\n", err)
				reach = nil
			}
			if envs == "" {
				if d, err := os.UserCacheDir(); err == nil {
					envs = filepath.Join(d, "tritonserver", "python-envs")
				}
			}
			items, err := builder.GC(ctxOf(cmd), p.Store, builder.GCOptions{Delete: del, Reachable: reach, KeepCache: int64(size), PythonEnvs: envs})
			var total int64
			for _, it := range items {
				total += it.Size
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", recipe.ByteSize(it.Size), it.Path, it.Why)
			}
			if err != nil {
				return err
			}
			switch {
			case len(items) == 0:
				fmt.Fprintf(w, "nothing to collect in %s\n", p.Store.Root)
			case del:
				fmt.Fprintf(w, "removed %d entries, %s\n", len(items), recipe.ByteSize(total))
			default:
				fmt.Fprintf(w, "would remove %d entries, %s (dry run: run with --delete)\n", len(items), recipe.ByteSize(total))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "remove what is listed (default: only list it)")
	cmd.Flags().StringVar(&keep, "keep-cache", keep, "size of the image layer cache and of the python env cache to keep, newest first")
	cmd.Flags().StringVar(&envs, "python-envs", "", "the server's python env cache (default: <user cache>/tritonserver/python-envs)")
	return cmd
}
