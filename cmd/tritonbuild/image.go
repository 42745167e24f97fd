package main

import "github.com/spf13/cobra"

// addImageCommands registers image, verify and all.
func addImageCommands(root *cobra.Command, g *globals) {}

func newAllCmd(g *globals) *cobra.Command {
	f := &buildFlags{}
	cmd := &cobra.Command{
		Use:   "all",
		Short: "Build build.yaml's targets, install them into the prefix and assemble the image",
		RunE: func(cmd *cobra.Command, args []string) error {
			_, _, err := runBuild(cmd, g, f, nil)
			return err
		},
	}
	f.register(cmd)
	return cmd
}
