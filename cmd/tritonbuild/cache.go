package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/remote"
)

// addCacheCommands registers `cache push|pull REF [NAME...]`, which move
// install trees between the store and a binary cache in an OCI registry.
func addCacheCommands(root *cobra.Command, g *globals) {
	cache := &cobra.Command{
		Use:   "cache",
		Short: "Share install trees through an OCI registry (binary cache tagged by node hash)",
	}
	var insecure bool
	cache.PersistentFlags().BoolVar(&insecure, "insecure", false, "talk plain HTTP to the registry")
	cache.AddCommand(&cobra.Command{
		Use:   "push REF [NAME...]",
		Short: "Upload the store's trees of NAMEs (default: the targets' closure) that REF does not hold",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args[1:])
			if err != nil {
				return err
			}
			ex := g.executor(p, cmd)
			ex.Cache = &remote.Cache{Ref: args[0], Options: remote.Options{Insecure: insecure}}
			n, err := ex.Push(ctxOf(cmd), plan.Nodes)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "pushed %d tree(s) to %s\n", n, args[0])
			return nil
		},
	}, &cobra.Command{
		Use:   "pull REF [NAME...]",
		Short: "Fill the store with the trees of NAMEs (default: the targets' closure) that REF holds, verified",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args[1:])
			if err != nil {
				return err
			}
			ex := g.executor(p, cmd)
			ex.Cache = &remote.Cache{Ref: args[0], Options: remote.Options{Insecure: insecure}}
			if _, err := plan.AskCache(ctxOf(cmd), ex.Cache, p.Store.Root, cmd.ErrOrStderr()); err != nil {
				return err
			}
			n, err := ex.Pull(ctxOf(cmd), plan.Nodes)
			if err != nil {
				return err
			}
			w := cmd.ErrOrStderr()
			fmt.Fprintf(w, "pulled %d tree(s) from %s\n", n, args[0])
			// Say why each other node was not pulled: the usual surprise
			// is a cache that holds nothing for this plan.
			for _, n := range plan.Nodes {
				if n.Status != builder.StatusCached || !strings.HasPrefix(n.Reason, "pulled from ") {
					fmt.Fprintf(w, "  %s %s: not pulled: %s\n", n.Name, n.Version, notPulledReason(n))
				}
			}
			return nil
		},
	})
	root.AddCommand(cache)
}

// notPulledReason says why `cache pull` left a node alone.
func notPulledReason(n *builder.Node) string {
	switch {
	case n.Status == builder.StatusExternal:
		return "external (" + n.External + ")"
	case n.Status == builder.StatusCached:
		return "already in the store"
	case n.Reason == "forced":
		return "forced to rebuild"
	case n.Reason != "":
		return n.Reason
	}
	return string(n.Status)
}
