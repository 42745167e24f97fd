package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder/scaffold"
	"github.com/tritonbuild/tritonbuild/recipes"
)

// newNewCmd is `tritonbuild new`, which writes project starting points.
func newNewCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Write the starting point of a project",
	}
	cmd.AddCommand(newNewOpCmd())
	return cmd
}

func newNewOpCmd() *cobra.Command {
	var dir, source string
	cmd := &cobra.Command{
		Use:   "op NAME",
		Short: "Write a custom TorchScript operator project: recipe, C++ op, model script, model repository, build.yaml",
		Long: `new op writes a project that builds lib<NAME>.so, a custom TorchScript
operator library (namespace NAME, one example op NAME::scaled_add), together
with the server that loads it, a script that makes a TorchScript model calling
the op, and a model repository whose config loads the library. NAME must be a
C++ identifier and a recipe name: a lowercase letter, then lowercase letters,
digits and '_'. Existing files are never overwritten.

The server and its runtime library build from the tritonbuild source tree
(--source, default: the tree around the current directory), so the project
gets copies of those two recipes pointing there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := scaffold.ValidateName(name); err != nil {
				return err
			}
			if dir == "" {
				dir = name
			}
			src, err := sourceTree(source)
			if err != nil {
				return err
			}
			written, err := scaffold.Write(scaffold.Options{Name: name, Dir: dir, Source: src, Builtin: recipes.FS()})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, p := range written {
				fmt.Fprintf(w, "  created %s\n", filepath.Join(dir, p))
			}
			fmt.Fprintf(w, "\nnext:\n  cd %s\n  tritonbuild all --profile system --no-image\n  /usr/bin/python3 scripts/make_model.py\n  opt/tritonserver/bin/tritonserver --model-repository=models\n  tritonbuild image --profile system\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "project directory (default: ./NAME)")
	cmd.Flags().StringVar(&source, "source", "", "tritonbuild source tree the server builds from (default: found above the current directory)")
	return cmd
}

// sourceTree resolves --source, or finds the tree around the working
// directory, as an absolute path.
func sourceTree(flag string) (string, error) {
	if flag != "" {
		abs, err := filepath.Abs(flag)
		if err != nil {
			return "", err
		}
		if !scaffold.IsSource(abs) {
			return "", fmt.Errorf("--source %s: not a tritonbuild source tree (no go.mod of module %s)", flag, scaffold.ModuleName)
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	src, err := scaffold.FindSource(wd)
	if err != nil {
		return "", fmt.Errorf("%w; give --source DIR (a tritonbuild checkout)", err)
	}
	return src, nil
}
