package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder/pyenv"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// newPyenvCmd is `tritonbuild pyenv`, the python backend's packed envs.
func newPyenvCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pyenv",
		Short: "Python execution environments for python-backend models (EXECUTION_ENV_PATH)",
	}
	cmd.AddCommand(newPyenvPackCmd())
	return cmd
}

func newPyenvPackCmd() *cobra.Command {
	var o pyenv.Options
	var maxSize string
	cmd := &cobra.Command{
		Use:   "pack",
		Short: "Write a deterministic venv.tar.gz from a requirements file or an existing venv",
		Long: `pack makes a venv offline (python -m venv, then pip install --no-index from
--find-links directories), or takes an existing one (--venv), and writes it
as a venv.tar.gz for a model's EXECUTION_ENV_PATH. The same inputs give the
same bytes, so the server's env cache (keyed by the archive's sha256)
extracts an unchanged env once, however often it is rebuilt and however
many models share it.

The archive holds venv/ without bytecode, with a bin/activate that finds the
env wherever it is extracted and a manifest of its packages
(venv/tritonbuild-pyenv.json). A venv runs its base interpreter, so that must
be the server's (--server-python); numpy and the --import modules must
import in a copy extracted as the server extracts it. An env over
--max-size unpacked is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := recipe.ParseByteSize(maxSize)
			if err != nil || size <= 0 {
				return fmt.Errorf("--max-size %q: want a positive size such as 512MiB or 4GiB", maxSize)
			}
			o.MaxSize = int64(size)
			w := cmd.ErrOrStderr()
			o.Report = func(msg string) { fmt.Fprintf(w, "==> %s\n", msg) }
			res, err := pyenv.Pack(ctxOf(cmd), o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			m := res.Manifest
			fmt.Fprintf(out, "%s: sha256 %s, %s (%s unpacked, %d entries)\n", res.Output, res.SHA256,
				humanBytes(res.Size), humanBytes(res.Unpacked), res.Files)
			where := "its own interpreter"
			if m.BaseInterpreter != "" {
				where = "a venv over " + m.BaseInterpreter
			}
			if m.SystemSitePackages {
				where += ", with system site packages"
			}
			fmt.Fprintf(out, "python %s (%s)\n", m.Python, where)
			fmt.Fprintf(out, "packages: %s\n", packageList(m.Packages))
			if m.SystemSitePackages {
				fmt.Fprintf(out, "from the base interpreter: %d packages (listed in the manifest)\n", len(m.SystemPackages))
			}
			fmt.Fprintf(out, "imports in an extracted copy: %s (numpy %s)\n", strings.Join(res.Imported, ", "), res.NumPy)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Output, "output", "o", "venv.tar.gz", "archive to write (replaced atomically)")
	fl.StringVarP(&o.Requirements, "requirements", "r", "", "pip requirements file to install into a new venv, offline")
	fl.StringArrayVar(&o.FindLinks, "find-links", nil, "directory of wheels or sdists for --requirements (repeatable); no index is ever used")
	fl.StringVar(&o.Venv, "venv", "", "pack this existing venv instead of making one (it is not changed)")
	fl.BoolVar(&o.SystemSitePackages, "system-site-packages", false, "let the new venv see the base interpreter's packages (numpy and torch from the distribution)")
	fl.StringVar(&o.Python, "python", "", "interpreter that makes the venv (default: --server-python)")
	fl.StringVar(&o.ServerPython, "server-python", pyenv.DefaultServerPython, "the interpreter the server has (host or image); a venv's base interpreter must be it")
	fl.StringArrayVar(&o.Imports, "import", nil, "module that must import in the env besides numpy (repeatable): the model's own imports")
	fl.StringVar(&maxSize, "max-size", recipe.ByteSize(pyenv.DefaultMaxSize).String(), "refuse envs larger than this unpacked (512MiB, 4GiB, ...)")
	return cmd
}

func packageList(ps []pyenv.Package) string {
	if len(ps) == 0 {
		return "none installed in the env itself"
	}
	var parts []string
	for _, p := range ps {
		parts = append(parts, p.Name+" "+p.Version)
	}
	return strings.Join(parts, ", ")
}
