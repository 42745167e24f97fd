package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder/fetch"
)

// newSourceCmd is `source apt NAME[=VERSION]`: the ready `source:` block of
// a recipe building from the distribution's source archive.
func newSourceCmd(g *globals) *cobra.Command {
	src := &cobra.Command{
		Use:   "source",
		Short: "Print ready source: blocks for recipes",
	}
	src.AddCommand(&cobra.Command{
		Use:   "apt NAME[=VERSION]",
		Short: "Print the source: block of a distribution source package (newest version unless VERSION), via the private deb-src lists",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			name, version, _ := strings.Cut(args[0], "=")
			s, err := fetch.ShowAptSource(ctxOf(cmd), name, version, p.Store.Sources(), fetch.Options{Log: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "# %s %s; the archives have: %s\n", s.Package, s.Version, strings.Join(s.Versions, ", "))
			fmt.Fprintf(w, "source:\n  apt: %s\n  apt_version: %q\n  file: %s\n  sha256: %s\n  strip: 1\n", s.Package, s.Version, s.File, s.SHA256)
			return nil
		},
	})
	return src
}
