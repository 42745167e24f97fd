package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tritonbuild/tritonbuild/builder"
	"github.com/tritonbuild/tritonbuild/builder/recipe"
)

// addImageCommands registers image and verify.
func addImageCommands(root *cobra.Command, g *globals) {
	root.AddCommand(newImageCmd(g), newVerifyCmd(g))
}

type imageFlags struct {
	req   builder.ImageRequest
	epoch int64
}

func (f *imageFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.req.Layout, "oci-layout", "", "write an OCI image layout to DIR")
	fl.StringVar(&f.req.Tarball, "tarball", "", "write a docker-loadable tarball to FILE")
	fl.StringVar(&f.req.Push, "push", "", "push to the registry reference REF (credentials from the Docker config)")
	fl.BoolVar(&f.req.Insecure, "insecure", false, "allow plain HTTP registries (push and base)")
	fl.StringVar(&f.req.Tag, "tag", "", "image name:tag (default: build.yaml's, else TARGET:latest)")
	fl.StringVar(&f.req.Base, "base", "", "base: scratch (default), a rootfs tarball, an OCI layout or a registry reference")
	fl.StringVar(&f.req.ModelRepository, "model-repository", "", "add DIR as /models in its own layer")
	fl.BoolVar(&f.req.Python, "python", false, "carry a Python interpreter with numpy and torch for python-backend models")
	fl.Int64Var(&f.epoch, "source-date-epoch", 0, "SOURCE_DATE_EPOCH (default: $SOURCE_DATE_EPOCH, else derived from the pinned sources)")
}

// resolve fills unset fields from build.yaml's image section.
func (f *imageFlags) resolve(p *builder.Project, target string) builder.ImageRequest {
	r := f.req
	img := p.Settings.Image
	if img == nil {
		img = &recipe.Image{}
	}
	r.Target = target
	if r.Target == "" {
		r.Target = img.Target
	}
	if r.Tag == "" {
		r.Tag = img.Tag
	}
	if r.Tarball == "" && r.Layout == "" && r.Push == "" {
		r.Tarball, r.Layout = p.Config.Abs(img.Tarball), p.Config.Abs(img.Layout)
	}
	if r.ModelRepository == "" {
		r.ModelRepository = p.Config.Abs(img.ModelRepository)
	}
	r.Python = r.Python || img.Python
	if f.epoch > 0 {
		r.Epoch = time.Unix(f.epoch, 0).UTC()
	}
	return r
}

func runImage(cmd *cobra.Command, p *builder.Project, plan *builder.Plan, req builder.ImageRequest) error {
	if req.Target == "" {
		return fmt.Errorf("no image target: give one or set image.target in build.yaml")
	}
	if req.Tarball == "" && req.Layout == "" && req.Push == "" {
		return fmt.Errorf("no output: give --oci-layout, --tarball or --push, or set them in build.yaml's image section")
	}
	req.Progress = imageProgress()
	req.Out = cmd.ErrOrStderr()
	start := time.Now()
	res, err := p.BuildImage(ctxOf(cmd), plan, req)
	if err != nil {
		return err
	}
	w := cmd.ErrOrStderr()
	if res.Unchanged {
		fmt.Fprintf(w, "image %s unchanged (inputs identical), outputs kept\n", res.Digest)
	} else {
		fmt.Fprint(w, res.Summary.String())
		fmt.Fprintf(w, "assembled in %s\n", time.Since(start).Round(time.Millisecond))
	}
	if req.Layout != "" {
		fmt.Fprintf(w, "OCI layout: %s\n", req.Layout)
	}
	if req.Tarball != "" {
		tag := req.Tag
		if tag == "" {
			tag = req.Target + ":latest"
		}
		fmt.Fprintf(w, "tarball: %s\nrun it with:\n  docker load -i %s\n  docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 -v /path/to/model_repository:/models:ro %s\n",
			req.Tarball, req.Tarball, tag)
	}
	return nil
}

func newImageCmd(g *globals) *cobra.Command {
	f := &imageFlags{}
	cmd := &cobra.Command{
		Use:   "image [TARGET]",
		Short: "Assemble an OCI image from the install trees of TARGET's closure (no Docker daemon)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			target := ""
			if len(args) == 1 {
				target = args[0]
			}
			req := f.resolve(p, target)
			if req.Target == "" {
				return fmt.Errorf("no image target: give one or set image.target in build.yaml")
			}
			plan, err := p.Plan(ctxOf(cmd), []string{req.Target}, nil)
			if err != nil {
				return err
			}
			return runImage(cmd, p, plan, req)
		},
	}
	f.register(cmd)
	return cmd
}

func newAllCmd(g *globals) *cobra.Command {
	bf := &buildFlags{}
	f := &imageFlags{}
	var noImage, forcePrefix bool
	cmd := &cobra.Command{
		Use:   "all",
		Short: "Build build.yaml's targets, install them into the prefix and assemble the image",
		RunE: func(cmd *cobra.Command, args []string) error {
			p, plan, err := runBuild(cmd, g, bf, nil)
			if err != nil {
				return err
			}
			if p.Settings.Prefix != "" {
				if err := builder.InstallIfChanged(ctxOf(cmd), p.Store, plan.Nodes, p.Config.Abs(p.Settings.Prefix), builder.InstallOptions{Force: forcePrefix}); err != nil {
					return err
				}
			}
			if noImage || p.Settings.Image == nil {
				return nil
			}
			return runImage(cmd, p, plan, f.resolve(p, ""))
		},
	}
	bf.register(cmd)
	f.register(cmd)
	cmd.Flags().BoolVar(&noImage, "no-image", false, "skip the image")
	cmd.Flags().BoolVar(&forcePrefix, "force-prefix", false, "install into a non-empty prefix that no tritonbuild install made (its other files are kept)")
	return cmd
}

func newVerifyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify NAME",
		Short: "Rebuild NAME into a temporary store and print the files that differ from the cached tree",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := g.open()
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp("", "tritonbuild-verify")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			diffs, err := builder.Verify(ctxOf(cmd), p, args[0], filepath.Join(tmp, "store"), g.executor(p, cmd))
			if err != nil {
				return err
			}
			if len(diffs) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: rebuilt tree is identical\n", args[0])
				return nil
			}
			for _, d := range diffs {
				fmt.Fprintln(cmd.OutOrStdout(), d)
			}
			return fmt.Errorf("%s: %s files differ", args[0], strconv.Itoa(len(diffs)))
		},
	}
}
