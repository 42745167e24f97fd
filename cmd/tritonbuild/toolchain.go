package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/remote"
	"github.com/tritonbuild/tritonbuild/toolchain"
)

func addToolchainCommands(root *cobra.Command, g *globals) {
	root.AddCommand(newDoctorCmd(g), newEnvCmd(g), newLaunchCmd())
}

// planWithJobs plans and annotates build nodes with their job counts.
func (g *globals) planWithJobs(cmd *cobra.Command, p *builder.Project, targets, force []string) (*builder.Plan, error) {
	plan, err := p.Plan(ctxOf(cmd), targets, force)
	if err != nil {
		return nil, err
	}
	host, err := g.host(cmd)
	if err != nil {
		return nil, err
	}
	jobs := 0
	if f := cmd.Flags().Lookup("jobs"); f != nil {
		fmt.Sscan(f.Value.String(), &jobs)
	}
	if jobs == 0 {
		jobs = p.Settings.Jobs.Max
	}
	builder.AssignJobs(plan, p.Store, host, jobs, p.Settings.Jobs.Reserve)
	dc, err := p.Settings.Distribute.Config()
	if err != nil {
		return nil, err
	}
	if jobs == 0 {
		builder.AddRemoteSlots(plan, dc)
	}
	if reg := p.Settings.Cache.Registry; reg != "" {
		if _, err := remote.Mark(ctxOf(cmd), plan, p.Store, reg, remoteOptions(p, cmd)); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

func remoteOptions(p *builder.Project, cmd *cobra.Command) remote.PlanOptions {
	return remote.PlanOptions{Options: remote.Options{Insecure: p.Settings.Cache.Insecure}, Out: cmd.ErrOrStderr(), BuildOnFailure: true}
}

func newLauncher(p *builder.Project, host *toolchain.Host) builder.LauncherFactory {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	base := &builder.MemoryLauncher{Exe: exe, Host: host}
	dc, err := p.Settings.Distribute.Config()
	if err != nil {
		return base
	}
	cc := p.Settings.Cache.Ccache.Config(p.Dir)
	if cc == nil && dc == nil {
		return base
	}
	return &builder.ChainLauncher{Base: base, Ccache: cc, Distcc: dc}
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
				nodes = append(nodes, toolchain.NodeNeed{Name: n.Name, DiskBytes: int64(n.Recipe.Disk), MemoryPerJob: int64(n.Recipe.Memory.Compile), Dir: p.Store.Root})
			}
			dc, err := p.Settings.Distribute.Config()
			if err != nil {
				return err
			}
			rep, err := toolchain.Doctor(ctxOf(cmd), toolchain.DoctorOptions{Probe: toolchain.ProbeOptions{Dirs: []string{p.Store.Root}}, Nodes: nodes, Distcc: dc, Compiler: "cc"})
			if err != nil {
				return err
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
