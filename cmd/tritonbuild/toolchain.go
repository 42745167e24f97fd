package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

func addToolchainCommands(root *cobra.Command, g *globals) {
	root.AddCommand(newDoctorCmd(g), newEnvCmd(g), newLaunchCmd())
}

func newLaunchCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "launch -- COMMAND [ARG...]",
		Short:              "Run a compile or link command under the build's memory broker (used by build tools)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			os.Exit(toolchain.Launch(ctxOf(cmd), args, os.Environ()))
			return nil
		},
	}
}

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [NAME...]",
		Short: "Check this machine for the planned build: tools, memory per job, disk",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := g.openPlan(cmd, args)
			if err != nil {
				return err
			}
			var nodes []toolchain.NodeNeed
			for _, n := range plan.Nodes {
				if n.Status != builder.StatusBuild {
					continue
				}
				// The same memory figures and reserve as the plan's.
				prof := builder.MemoryProfile(p.Store, n)
				nodes = append(nodes, toolchain.NodeNeed{Name: n.Name, DiskBytes: int64(n.Recipe.Disk), MemoryPerJob: prof.CompileBytes, LinkPerJob: prof.LinkBytes, Dir: p.Store.Root,
					Packages: n.Recipe.HostPackagesOf(n.Ver)})
			}
			dc, err := p.Settings.Distribute.Config()
			if err != nil {
				return err
			}
			rep, err := toolchain.Doctor(ctxOf(cmd), toolchain.DoctorOptions{Probe: toolchain.ProbeOptions{Dirs: []string{p.Store.Root}}, Nodes: nodes, Distcc: dc, Compiler: "cc", Reserve: int64(p.Settings.Jobs.Reserve)})
			if err != nil {
				return err
			}
			// An external that passed its probe can still cost the user
			// (the recipe's warn checks): say so beside the host's checks.
			for _, n := range plan.Nodes {
				if n.Status != builder.StatusExternal {
					continue
				}
				if len(n.Warnings) == 0 {
					rep.Checks = append(rep.Checks, toolchain.Check{Name: "external " + n.Name, OK: true, Detail: n.Reason + ": its probe passed"})
				}
				for _, w := range n.Warnings {
					rep.Checks = append(rep.Checks, toolchain.Check{Name: "external " + n.Name, Detail: w})
				}
			}
			// Before hours of building depend on them: can the sources
			// be fetched from here (or are they cached)?
			ex := &builder.Executor{Store: p.Store, Settings: p.Settings, Config: p.Config}
			for _, sr := range ex.ReachSources(ctxOf(cmd), plan.Nodes) {
				c := toolchain.Check{Name: "source of " + sr.Node.Name + " " + sr.Node.Version, OK: sr.OK, Hard: true, Detail: sr.Detail}
				if len(sr.Alternatives) > 0 {
					c.Detail += "\n    what else gets " + sr.Node.Name + ":\n      - " + strings.Join(sr.Alternatives, "\n      - ")
				}
				rep.Checks = append(rep.Checks, c)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), rep)
			}
			if !rep.OK() {
				return fmt.Errorf("doctor: hard requirements missing (see above)")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newEnvCmd(g *globals) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print the shell exports for the installed stack (edits no file)",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			if prefix == "" {
				prefix = p.Config.Abs(p.Settings.Prefix)
			}
			llvm := ""
			if ext, ok := p.Settings.Externals["llvm"]; ok {
				llvm = ext
			} else if plan, err := p.Plan(ctxOf(cmd), []string{"llvm"}, nil); err == nil {
				llvm = plan.Node("llvm").Prefix(p.Store)
			}
			abs, _ := filepath.Abs(prefix)
			// The exports are printed anyway (they may be for later), but
			// a person should know when they point at nothing yet.
			if _, err := os.Stat(abs); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the prefix %s does not exist yet (tritonbuild install or all creates it)\n", abs)
			}
			if llvm != "" {
				if _, err := os.Stat(llvm); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: LLVM at %s does not exist (not built yet, or a wrong external)\n", llvm)
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), toolchain.EnvExports(abs, llvm))
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "install prefix (default: build.yaml's prefix)")
	return cmd
}

func printDoctor(w io.Writer, rep *toolchain.Report) {
	h := rep.Host
	fmt.Fprintf(w, "CPUs: %d usable (%s)\n", h.CPU.Usable, h.CPU.Reason)
	fmt.Fprintf(w, "memory: %s usable\n", toolchain.FormatBytes(h.Memory.Usable))
	for _, c := range rep.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			if !c.Hard {
				mark = "warn"
			}
		}
		fmt.Fprintf(w, "[%s] %s: %s\n", mark, c.Name, c.Detail)
	}
	if rep.AptGetMissing != "" {
		fmt.Fprintf(w, "\ninstall what is missing with:\n  %s\n", rep.AptGetMissing)
	}
}
